import pytest


@pytest.fixture
def cache_dir(tmp_path):
    """A fresh calibration cache directory (the library has no default cache: nothing else is touched)."""
    return tmp_path / "calibration"


@pytest.fixture
def cache(cache_dir):
    from empriv.privacy.cache import CalibrationCache

    return CalibrationCache(cache_dir)
