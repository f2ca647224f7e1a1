"""The ``project`` fixture of the reliability suite (tests/reliability/reliability_project.py)."""

from __future__ import annotations

import pytest

from reliability_project import Project


@pytest.fixture
def project(tmp_path) -> Project:
    work = tmp_path / "project"
    work.mkdir()
    return Project(work)
