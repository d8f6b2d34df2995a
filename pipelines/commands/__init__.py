"""The `gpu-pipeline` commands, one module each: `add_parser(commands, parser_class)`
declares its flags, `run(args)` does the work and returns the exit code.

`run` (the local run), `compile`, `submit`, `schedule`, `models`, `publish` and
`validate_gpu`; `common` holds what they share (configuration flags, loading the
configuration, path checks).
"""
