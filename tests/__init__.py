"""The tests mirror the project's packages: `tests/<package>/test_<module>.py` tests that
module (`tests/components/gpu/test_pools.py` the rules of `components/gpu/pools.py`);
`support/` holds the fakes and helpers several test modules share; `test_architecture.py`
(layers, circles, the error model, options declared once, every module tested),
`test_docs.py` (the README's and docs' commands, links and paths) and `test_shared_rules.py`
(rules every layer shares) look at the whole project."""
