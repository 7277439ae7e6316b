"""Host/device labels every benchmark result carries."""

from __future__ import annotations

import os
import platform


def host() -> dict:
    cpu = platform.processor()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import torch

    info = {"machine": platform.machine(), "cpu": cpu, "cores": os.cpu_count(),
            "python": platform.python_version(), "torch": torch.__version__,
            "device": "cpu"}
    if torch.cuda.is_available():
        info["device"] = torch.cuda.get_device_name(0)
    return info
