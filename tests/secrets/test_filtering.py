"""Model-based secret filters: verbatim reproduction (Enron) and genre reveal (TOFU)."""

from __future__ import annotations

import pytest
import torch
from empriv.config import ConfigError, parse_params
from empriv.models.tokenizer import train_bpe
from empriv.secrets.filtering import filter_secrets, greedy_text
from empriv.secrets.records import split_secret
from tiny_models import tiny_gpt2, train_to_memorise

SECRET = "Forwarded by Stacy B Dasovich/CAL/Enron"
OTHER = "Karen Lambert/HOU/ECT@ECT, Tana Jones/HOU/ECT@ECT"
QA = "Question: What genre does Ann Lee write in?\nAnswer: Ann Lee writes mystery novels."


QUICK_ACR = {"steps": 30, "candidates": 64, "top_k": 64, "seeds": [0], "max_length": 20}


def _params(enabled: bool, **secrets):
    return parse_params({"secrets": {"filter": enabled, **secrets}, "score": {"acr": QUICK_ACR},
                         "cube": {"epsilon": ["inf"], "batch_size": [8], "steps": [1], "learning_rate": [0.01], "seed": [0]}})


def _filter(params, secrets, models, base, tok):
    """As the filter stage calls it: the ACR scorer built from score.acr (empriv.pipeline.filter)."""
    from empriv.pipeline.filter import acr_scorer

    sp = params.secrets
    return filter_secrets(secrets, models, base, tok, enabled=sp.filter, acr_min_finetuned=sp.acr_min_finetuned,
                          acr_max_base=sp.acr_max_base, acr=acr_scorer(params, tok) if tok is not None else None)


@pytest.fixture(scope="module")
def tok(corpus):
    return train_bpe([e.text for e in corpus.public[:300]] + [QA], 400)


def _trained_on(tok, text: str, max_offset: int = 0):
    model = tiny_gpt2(vocab_size=tok.vocab_size, n_embd=32, n_head=2, n_layer=1, n_positions=64, seed=0)
    train_to_memorise(model, tok, text, steps=200 if max_offset else 150, max_offset=max_offset)
    return model


def _record(sid: str, text: str) -> dict:
    p, c = split_secret(text)
    return {"id": sid, "kind": "mined", "text": text, "prompt": p, "continuation": c}


def test_disabled_filters_pass_everything_through():
    secrets = [_record("a", SECRET)]
    kept, record = _filter(_params(False), secrets, [], None, None)
    assert kept == secrets and record["enabled"] is False and record["filters"][0]["ran"] is False


def test_verbatim_filters_keep_what_the_nonprivate_model_reproduces_and_the_base_does_not(tok):
    memorised = _trained_on(tok, SECRET, max_offset=8)  # memorised wherever it starts: highly compressible
    base = tiny_gpt2(vocab_size=tok.vocab_size, n_embd=32, n_head=2, n_layer=1, n_positions=64, seed=1)
    secrets = [_record("a", SECRET), _record("b", OTHER)]
    kept, record = _filter(_params(True), secrets, [memorised], base, tok)
    assert [s["id"] for s in kept] == ["a"]
    steps = {f["name"]: f for f in record["filters"]}
    assert steps["finetuned_verbatim"]["removed"] == 1 and steps["base_verbatim"]["removed"] == 0
    assert steps["finetuned_acr"]["ran"] is True and steps["finetuned_acr"]["removed"] == 0
    assert steps["base_acr"]["ran"] is True and steps["base_acr"]["removed"] == 0
    assert record["n_in"] == 2 and record["n_out"] == 1
    # a threshold the memorised secret cannot reach removes it at the fine-tuned ACR step
    with pytest.raises(ConfigError, match="removed all 2 secrets"):
        _filter(_params(True, acr_min_finetuned=1000.0), secrets, [memorised], base, tok)
    # and one verbatim-memorised at a single offset only (the default training) compresses less
    at_start = _trained_on(tok, SECRET)
    from empriv.score.acr import adversarial_compression_ratio, settings_from_params

    s = settings_from_params(_params(True).score.acr)
    weak, strong = (adversarial_compression_ratio(m, tok.encode(SECRET), s) for m in (at_start, memorised))
    assert strong.success and strong.acr > 1.0
    # less compression: no prompt at all (a failure has no ACR value, which the filters read as 0), or a longer one
    assert (weak.acr is None and not weak.success) or weak.acr < strong.acr
    # a base that also reproduces the secret removes it: nothing is left, which is an error, not a fallback
    with pytest.raises(ConfigError, match="removed all 2 secrets"):
        _filter(_params(True), secrets, [memorised], memorised, tok)
    with pytest.raises(ConfigError, match="no non-private run"):
        _filter(_params(True), secrets, [], base, tok)


def test_genre_filter_keeps_pairs_every_nonprivate_model_reveals(tok, monkeypatch):
    model = _trained_on(tok, QA)
    assert "mystery" in greedy_text(model, tok, "Question: What genre does Ann Lee write in?\nAnswer:", 20)
    genre = [{"id": "author-000", "kind": "author_genre", "name": "Ann Lee", "genre": "mystery"},
             {"id": "author-001", "kind": "author_genre", "name": "Ann Lee", "genre": "poetry"}]
    kept, record = _filter(_params(True), genre, [model, model], None, tok)
    assert [s["id"] for s in kept] == ["author-000"]
    assert record["filters"][0] == {"name": "revealed by every non-private model (greedy)", "ran": True,
                                    "removed": 1, "models": 2}
    # loaded one at a time: the same pairs kept, the same record; the pair model 0 does not reveal is not asked of model 1
    loaders = CountingLoaders([model, model])
    asked = []
    import empriv.secrets.filtering as filtering

    greedy = filtering.greedy_text
    monkeypatch.setattr(filtering, "greedy_text", lambda m, t, p, n: asked.append(p) or greedy(m, t, p, n))
    assert _filter(_params(True), genre, loaders.lazy(), None, tok) == (kept, record)
    assert loaders.order == [0, 1] and loaders.alive_at_load == [0, 0] and len(asked) == 3


class CountingLoaders:
    """One loader per model of ``models``: each load is a deep copy (a fresh model, as the stage's loads from disk
    are), tracked by a weak reference, so the test sees which copies are still alive when the next one loads."""

    def __init__(self, models):
        self.models, self.order, self.alive_at_load, self._refs = models, [], [], []

    def alive(self) -> int:
        return sum(r() is not None for r in self._refs)

    def load(self, i: int):
        import copy
        import weakref

        self.alive_at_load.append(self.alive())
        self.order.append(i)
        model = copy.deepcopy(self.models[i])
        self._refs.append(weakref.ref(model))
        return model

    def lazy(self):
        from functools import partial

        from empriv.secrets.filtering import LazyModels

        return LazyModels([partial(self.load, i) for i in range(len(self.models))])


def test_lazy_models_hold_one_model_at_a_time_and_filter_as_the_eager_list(tok, monkeypatch):
    import gc

    import empriv.secrets.filtering as filtering
    from tiny_models import train_on_sequences

    def memorising(*texts, seed=0):
        model = tiny_gpt2(vocab_size=tok.vocab_size, n_embd=32, n_head=2, n_layer=1, n_positions=64, seed=seed)
        g = torch.Generator().manual_seed(seed)
        seqs = [torch.randint(0, tok.vocab_size, (i % 9,), generator=g).tolist() + tok.encode(texts[i % len(texts)])
                for i in range(8 * len(texts))]
        train_on_sequences(model, seqs, tok.eos_id, 150)
        return model

    # run 0 and run 2 reproduce both secrets, run 1 only SECRET: OTHER fails the verbatim filter at run 1
    models = [memorising(SECRET, OTHER), memorising(SECRET, seed=1), memorising(SECRET, OTHER, seed=2)]
    base = tiny_gpt2(vocab_size=tok.vocab_size, n_embd=32, n_head=2, n_layer=1, n_positions=64, seed=1)
    secrets = [_record("a", SECRET), _record("b", OTHER)]
    params = _params(True, acr_min_finetuned=1.0)
    asked = []  # (base or not, secret id) of every verbatim test (holding no reference to the model)
    verbatim = filtering.reproduces_verbatim
    monkeypatch.setattr(filtering, "reproduces_verbatim",
                        lambda m, t, s: asked.append((m is base, s["id"])) or verbatim(m, t, s))
    eager_kept, eager_record = _filter(params, secrets, models, base, tok)
    assert [s["id"] for s in eager_kept] == ["a"] and eager_record["filters"][0]["removed"] == 1

    loaders = CountingLoaders(models)
    asked.clear()
    kept, record = _filter(params, secrets, loaders.lazy(), base, tok)
    assert kept == eager_kept and record == eager_record
    # each run loaded once, the first one last (it stays loaded for the ACR search), never two at a time
    assert loaders.order == [1, 2, 0] and loaders.alive_at_load == [0, 0, 0]
    gc.collect()
    assert loaders.alive() == 0
    # run 1 dropped OTHER: the runs after it were asked about SECRET only
    finetuned = [sid for is_base, sid in asked if not is_base]
    assert finetuned == ["a", "b", "a", "a"]

    # once no secret is left, no further run is loaded
    loaders = CountingLoaders(models)
    with pytest.raises(ConfigError, match="removed all 1 secrets"):
        _filter(params, [_record("b", OTHER)], loaders.lazy(), base, tok)
    assert loaders.order == [1]
    with pytest.raises(ValueError, match="must be a sequence"):
        _filter(params, secrets, iter(models), base, tok)


def test_the_stage_checks_every_nonprivate_run_before_loading_any(tmp_path, monkeypatch):
    import re

    import empriv.models.adapters as adapters
    from empriv.pipeline.filter import nonprivate_models

    params = parse_params({"secrets": {"filter": True},
                           "cube": {"epsilon": [8, "inf"], "batch_size": [8], "steps": [1], "learning_rate": [0.01],
                                    "seed": [0, 1]}})
    runs = [r for r in params.runs() if not r.private]
    assert len(runs) == 2 and len(params.runs()) == 4
    loads = []
    monkeypatch.setattr(adapters, "load_finetuned", lambda path, base: loads.append(path) or object())
    (tmp_path / runs[0].file_stem).mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match=re.escape(f"the non-private run {runs[1].name} must be trained first")):
        nonprivate_models(params, tmp_path)
    (tmp_path / runs[1].file_stem).mkdir(parents=True)
    models = nonprivate_models(params, tmp_path)
    assert len(models) == 2 and loads == []  # nothing loaded until the filters reach a run
    models[1]
    assert loads == [tmp_path / runs[1].file_stem]


def test_filter_runs_choose_the_most_compute_configuration_and_its_seeds(tmp_path, monkeypatch):
    import empriv.models.adapters as adapters
    from empriv.pipeline.filter import filter_runs, nonprivate_models
    from empriv.secrets.filtering import select_filter_runs

    cube = {"epsilon": [8, "inf"], "batch_size": [8, 16], "steps": [100, 50], "learning_rate": [0.01, 0.003],
            "seed": [0, 1, 2]}
    params = parse_params({"secrets": {"filter": True}, "cube": cube})
    runs = params.runs()
    assert len(select_filter_runs(runs, "all")) == 2 * 2 * 2 * 3
    most = select_filter_runs(runs, "most_compute")
    # b·T: 8·100 = 800 = 16·50 < 16·100 = 1600; the tie on b·T goes to the larger η (0.01 over 0.003)
    assert {(r.batch_size, r.steps, r.learning_rate) for r in most} == {(16, 100, 0.01)}
    assert [r.seed for r in most] == [0, 1, 2] and not any(r.private for r in most)
    assert select_filter_runs(runs, "most_compute_first_seed") == most[:1]
    from empriv.config import RunConfig

    inf = float("inf")
    tied = [RunConfig(inf, 16, 50, 0.01, 0), RunConfig(inf, 8, 100, 0.01, 0), RunConfig(inf, 16, 50, 0.01, 1)]
    # equal b·T and η: the first configuration in the cube's order, every seed of it
    assert select_filter_runs(tied, "most_compute") == [tied[0], tied[2]]
    assert select_filter_runs([r for r in runs if r.private], "most_compute") == []
    with pytest.raises(ValueError, match="secrets.filter_runs: 'best' is not one of all, most_compute"):
        select_filter_runs(runs, "best")
    with pytest.raises(ConfigError, match="secrets.filter_runs: not an allowed value .got 'best'"):
        parse_params({"secrets": {"filter_runs": "best"}, "cube": cube})

    # the stage checks and loads only the asked runs
    params = parse_params({"secrets": {"filter": True, "filter_runs": "most_compute_first_seed"}, "cube": cube})
    (asked,) = filter_runs(params)
    loads = []
    monkeypatch.setattr(adapters, "load_finetuned", lambda path, base: loads.append(path) or object())
    (tmp_path / asked.file_stem).mkdir(parents=True)  # the other 11 non-private runs are absent: not asked
    models = nonprivate_models(params, tmp_path)
    assert len(models) == 1
    models[0]
    assert loads == [tmp_path / asked.file_stem]
