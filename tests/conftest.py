"""Shared fixtures of the unit suite (tests/privacy has its own conftest)."""

from __future__ import annotations

import os

import pytest
import torch

from tiny_models import tiny_gpt2


def pytest_configure(config):
    config.addinivalue_line("markers", "optional(reason): a test that may skip in CI (a manual check, a GPU, a tool no "
                                       "package ships); every other test that skips under CI=true fails the run")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under ``CI=true`` a required test that skips is a failure: a missing install step, a data file not beside the
    checkout or a cluster that did not start must not pass CI quietly. Tests marked ``optional`` may skip."""
    outcome = yield
    report = outcome.get_result()
    if (report.skipped and os.environ.get("CI", "").lower() == "true" and item.get_closest_marker("optional") is None
            and not hasattr(report, "wasxfail")):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reason = reason.removeprefix("Skipped: ")
        report.outcome = "failed"
        report.longrepr = f"a required test skipped under CI=true ({reason}); mark it optional only if CI cannot run it"


@pytest.fixture(autouse=True, scope="session")
def _single_thread():
    """One torch thread: the suite shares a 2-core machine with timing experiments."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="session")
def corpus():
    """The default-sized synthetic corpus (seed 0), generated once."""
    from empriv.data.synthetic import generate_corpus

    return generate_corpus(3000, 200, 300, 6000, seed=0)


@pytest.fixture(scope="session")
def public_bpe(corpus):
    """A 2,048-token byte-level BPE trained on the public split only (as the tokenizer stage does)."""
    from empriv.models.tokenizer import train_bpe

    return train_bpe([e.text for e in corpus.public], 2048)


@pytest.fixture(scope="session")
def public_tokenizer_dir(public_bpe, tmp_path_factory):
    """``public_bpe`` saved as the tokenizer stage saves it (a Hugging Face tokenizer directory + meta.json)."""
    d = tmp_path_factory.mktemp("tokenizer")
    public_bpe.save(d)
    return d


@pytest.fixture(scope="session")
def gpt2_tokenizer():
    from empriv.models.tokenizer import load_gpt2

    return load_gpt2()


@pytest.fixture
def make_tiny_gpt2():
    return tiny_gpt2


@pytest.fixture(scope="session")
def tiny_pipeline(tmp_path_factory):
    """tests/test_pipeline.py's tiny default (``TINY``: tiny-gpt2, its BPE, a 4-run cube and a 2-run audit cube) in a
    scratch copy of the repository, `dvc repro` run once, built once per session: ``(work, env, proc, pristine)``.
    tests/test_pipeline.py's tests work in ``work`` itself and change it (as they did when the module built it);
    ``pristine`` is a copy taken right after the run, which other modules copy again (``test_pipeline.copy_repo``)
    and never change. (``work`` stays where DVC built it: DVC removes the outputs a `dvc exp apply` drops only
    where it recorded checking them out, which a copied repository does not have.)"""
    from test_pipeline import TINY, copy_repo, make_repo

    tmp = tmp_path_factory.mktemp("tiny-pipeline")
    work, env, proc = make_repo(tmp, TINY)
    return work, env, proc, copy_repo(work, tmp / "pristine")


def pytest_sessionfinish(session, exitstatus):
    """Stop the warm servers of the scratch repositories (tests/test_pipeline.py's ``shared_warm_dir``), if any."""
    import sys

    pipeline = sys.modules.get("test_pipeline")
    if pipeline is not None and pipeline._SHARED_WARM:
        pipeline.stop_warm_servers(pipeline._SHARED_WARM[0], remove=True)
