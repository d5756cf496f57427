import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from fake_nvml import FakeNvml  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def fake_nvml(monkeypatch, tmp_path):
    """Install a fake `pynvml` built from a scenario; no nvidia-smi on PATH, an empty sysfs."""
    from gputopo import probe

    def install(*args, **kwargs):
        fake = FakeNvml(*args, **kwargs)
        monkeypatch.setitem(sys.modules, "pynvml", fake)
        return fake
    monkeypatch.setattr(probe, "SYSFS_PCI", tmp_path / "sysfs")
    monkeypatch.setattr(probe.shutil, "which", lambda name: None)
    return install


def fixture_text(name: str) -> str:
    return (FIXTURES / "topo" / name).read_bytes().decode()
