"""The machine's figures sampled beside training, on every replica: each GPU through NVML
(nvidia-ml-py), the host's CPU, memory and network through psutil.

A thread reads them every `interval` seconds and adds a `sample` line to the replica's
efficiency series (`trainer.run.efficiency_log`), flushed every `flush_every` seconds and
when it stops. What cannot be read is reported as unavailable, with why, never as zeros: a
machine without a GPU or without NVML has `"gpus": {"unavailable": "..."}`.

The network counters are the host's: they count the all-reduce's traffic and Cloud
Storage reads together.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from trainer.run.efficiency_log import SeriesFile

log = logging.getLogger("trainer")

#: NVML's clock-throttle reason bits (nvml.h, nvmlClocksEventReasons), by name.
THROTTLE_REASONS = {0x1: "gpu_idle", 0x2: "applications_clocks_setting",
                    0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x10: "sync_boost",
                    0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
                    0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting"}


def load_nvml() -> tuple[Any, str]:
    """(the pynvml module, initialised; "") or (None, why it is unavailable)."""
    try:
        import pynvml
    except ImportError:
        return None, "nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - NVMLError_* of every kind: no driver, no GPU
        return None, f"NVML cannot start: {exc}"
    return pynvml, ""


def read_gpus(nvml: Any) -> list[dict[str, Any]]:
    """Each GPU's figures now (NVML's units converted: bytes, watts, MHz, percent)."""
    found = []
    for index in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        rates = nvml.nvmlDeviceGetUtilizationRates(handle)
        memory = nvml.nvmlDeviceGetMemoryInfo(handle)
        # Renamed "clocks event reasons" in recent NVML; the old name is kept as an alias.
        reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons",
                          getattr(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None))(handle)
        name = nvml.nvmlDeviceGetName(handle)
        found.append({
            "index": index, "name": name.decode() if isinstance(name, bytes) else name,
            "utilization_percent": rates.gpu,
            "memory_used_bytes": memory.used, "memory_total_bytes": memory.total,
            "power_watts": round(nvml.nvmlDeviceGetPowerUsage(handle) / 1000, 1),
            "temperature_c": nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU),
            "sm_clock_mhz": nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM),
            "throttle_reasons": [name for bit, name in THROTTLE_REASONS.items()
                                 if reasons & bit and name != "gpu_idle"]})
    return found


def read_host(psutil: Any) -> dict[str, Any]:
    """The host's CPU use since the last call, its memory, and its network byte counters."""
    memory = psutil.virtual_memory()
    network = psutil.net_io_counters()
    return {"cpu_percent": psutil.cpu_percent(interval=None),
            "memory_used_bytes": memory.total - memory.available,
            "memory_total_bytes": memory.total,
            "network_sent_bytes": network.bytes_sent, "network_received_bytes": network.bytes_recv}


class Sampler:
    """Samples until `stop()`; a context manager.

    Args:
        series: The replica's efficiency file.
        interval: Seconds between samples.
        flush_every: Seconds between appends to the file.
        nvml: The initialised pynvml module, or None with `nvml_missing` saying why.
    """

    def __init__(self, series: SeriesFile, interval: float = 2.0, flush_every: float = 30.0,
                 nvml: Any = None, nvml_missing: str = ""):
        self.series, self.interval, self.flush_every = series, interval, flush_every
        self.nvml, self.nvml_missing = nvml, nvml_missing
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="efficiency-sampler",
                                        daemon=True)
        try:
            import psutil
        except ImportError:
            psutil = None
        self.psutil = psutil

    def sample(self) -> dict[str, Any]:
        """One sample's figures."""
        figures: dict[str, Any] = {"at": round(time.time(), 3)}
        if self.nvml is None:
            figures["gpus"] = {"unavailable": self.nvml_missing or "no NVML"}
        else:
            try:
                figures["gpus"] = read_gpus(self.nvml)
            except Exception as exc:  # noqa: BLE001 - an NVML error ends GPU sampling only
                figures["gpus"] = {"unavailable": f"NVML failed: {exc}"}
        figures["host"] = read_host(self.psutil) if self.psutil is not None else \
            {"unavailable": "psutil is not installed"}
        return figures

    def _run(self) -> None:
        flushed = time.monotonic()
        if self.psutil is not None:
            self.psutil.cpu_percent(interval=None)  # the first reading starts the count
        while not self._stop.wait(self.interval):
            self.series.add("sample", **self.sample())
            if time.monotonic() - flushed >= self.flush_every:
                self.series.flush()
                flushed = time.monotonic()

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.series.add("sample", **self.sample())  # a run shorter than `interval` has one
        self.series.flush()
