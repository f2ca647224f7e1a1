import pytest


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    """Never touch the user's accounting cache."""
    d = tmp_path / "cache"
    monkeypatch.setenv("EMPRIV_CACHE_DIR", str(d))
    return d
