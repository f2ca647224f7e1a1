"""TOFU variants and paraphrasers (empriv.data.variants)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from empriv.data.tofu import QARecord, extract_secrets
from empriv.data.variants import (
    SYSTEM_PROMPT,
    CachedParaphraser,
    LLMParaphraser,
    OfflineParaphraser,
    Paraphraser,
    ParaphraserUnavailable,
    build_variant,
    density_adjusted,
    density_groups,
    paraphrase_record,
    paraphrase_scaled,
    with_synthetic_authors,
)


def _records(n_authors):
    return [QARecord(f"What genre does Author{a} write in ({i})?", f"Author{a} writes in the true crime genre ({i}).")
            for a in range(n_authors) for i in range(20)]


class Tagger:
    """A paraphraser that tags text: paraphrase j of t is 't#j'."""

    id = "tagger"

    def __init__(self):
        self.calls = 0

    def paraphrase(self, text, n):
        self.calls += 1
        return [f"{text}#{j + 1}" for j in range(n)]


def test_offline_paraphraser_is_deterministic_distinct_and_keeps_names_and_genres():
    p = OfflineParaphraser(seed=0, protect=["true crime", "love inspired"])
    assert isinstance(p, Paraphraser)
    text = "Jaime Vasquez primarily writes in the True Crime genre and is known for many books."
    out = p.paraphrase(text, 7)
    assert out == OfflineParaphraser(seed=0, protect=["love inspired", "true crime"]).paraphrase(text, 7)
    assert len(set(out)) == 7 and text not in out
    assert all("Jaime Vasquez" in o and "True Crime genre" in o for o in out)
    assert OfflineParaphraser(seed=1, protect=["true crime"]).paraphrase(text, 7) != out
    assert p.paraphrase(text, 3) == out[:3]  # paraphrase j depends on (seed, text, j) only
    assert all("love inspired" in o for o in p.paraphrase("She loves the love inspired genre; many readers agree.", 5))
    assert p.paraphrase("x", 0) == []
    with pytest.raises(ValueError, match="n must be >= 0"):
        p.paraphrase("x", -1)


def test_paraphrase_record_pairs_question_and_answer():
    assert paraphrase_record(QARecord("q", "a"), Tagger(), 2) == [QARecord("q#1", "a#1"), QARecord("q#2", "a#2")]


def test_paraphrase_scaled_tofu_2_and_4():
    recs = _records(3)
    v2 = paraphrase_scaled(recs, Tagger(), 2)
    assert v2.name == "tofu-2" and len(v2.records) == 120
    assert v2.records[:4] == [recs[0], QARecord(recs[0].question + "#1", recs[0].answer + "#1"), recs[1],
                              QARecord(recs[1].question + "#1", recs[1].answer + "#1")]
    assert v2.sources[:4] == [0, 0, 1, 1] and v2.paraphrase_index[:4] == [0, 1, 0, 1]
    assert v2.authors.count(0) == 40 and v2.secret_authors == [0, 1, 2]
    v4 = build_variant("tofu-4", recs, Tagger())
    assert len(v4.records) == 240 and v4.paraphrase_index[:4] == [0, 1, 2, 3]
    assert build_variant("tofu-1", recs).records == recs
    with pytest.raises(ValueError, match="a paraphraser is required"):
        paraphrase_scaled(recs, None, 2)


@pytest.mark.parametrize("name,lo,hi", [("tofu-1:7", 1, 7), ("tofu-2:6", 2, 6), ("tofu-3:5", 3, 5)])
def test_density_adjusted_same_size_as_tofu_4(name, lo, hi):
    recs = _records(4)
    v = build_variant(name, recs, Tagger(), seed=3)
    assert v.name == name and len(v.records) == len(build_variant("tofu-4", recs, Tagger()).records) == 320
    assert sorted(v.groups.values()) == [0, 0, 1, 1]
    for a, g in v.groups.items():
        assert v.authors.count(a) == 20 * (hi if g else lo)
    s = v.summary()
    assert (s["group0_samples"], s["group1_samples"], s["samples"]) == (40 * lo, 40 * hi, 320)
    assert max(v.paraphrase_index) == hi - 1


def test_density_groups_seeded_and_validated():
    g = density_groups(10, seed=0)
    assert g == density_groups(10, seed=0) and sum(g.values()) == 5
    assert any(density_groups(10, seed=s) != g for s in range(1, 5))
    with pytest.raises(ValueError, match="even number"):
        density_groups(5, seed=0)
    with pytest.raises(ValueError, match="lo \\+ hi = 8"):
        density_adjusted(_records(2), Tagger(), (4, 5))


def test_tofu_2_star_doubles_size_keeps_secret_count():
    recs = _records(4)
    v = build_variant("tofu-2*", recs, seed=1)
    assert len(v.records) == 160 and v.records[:80] == recs
    assert v.secret_authors == [0, 1, 2, 3] and sorted(set(v.authors)) == list(range(8))
    assert v.sources[80:] == [None] * 80
    assert [s.name is not None for s in extract_secrets(v.records[80:])] == [True] * 4
    assert with_synthetic_authors(recs, seed=1).records == v.records


def test_unknown_variant():
    with pytest.raises(ValueError, match=r"data.variant must be one of .*'tofu-2\*'.*got 'tofu-3'"):
        build_variant("tofu-3", _records(1))


def test_cache_hits_grows_and_saves_atomically(tmp_path):
    path = tmp_path / "cache" / "paraphrases.json"
    inner = Tagger()
    c = CachedParaphraser(inner, path)
    assert c.paraphrase("t", 2) == ["t#1", "t#2"] and inner.calls == 1
    assert c.paraphrase("t", 1) == ["t#1"] and inner.calls == 1 and c.hits == 1
    assert c.paraphrase("t", 3) == ["t#1", "t#2", "t#3"] and inner.calls == 2
    c.save()
    assert [p.name for p in path.parent.iterdir()] == ["paraphrases.json"]  # no temp file left
    again = CachedParaphraser(Tagger(), path)
    assert again.paraphrase("t", 3) == ["t#1", "t#2", "t#3"] and again.inner.calls == 0
    assert CachedParaphraser.key("a", "b") != CachedParaphraser.key("a", "c") != CachedParaphraser.key("x", "b")
    path.write_text('{"entries": []}')
    with pytest.raises(ValueError, match="not a version-1 cache"):
        CachedParaphraser(Tagger(), path)


def test_llm_paraphraser_is_lazy_and_carries_the_research_settings():
    p = LLMParaphraser(seed=2)
    assert p._pipe is None and p.id == "llm:meta-llama/Llama-3.1-8B-Instruct:seed2"
    assert {k: p.generation_kwargs[k] for k in ("temperature", "top_p", "top_k", "max_new_tokens")} == {
        "temperature": 1.0, "top_p": 1.0, "top_k": 50, "max_new_tokens": 120}
    assert SYSTEM_PROMPT.startswith("You are an expert at paraphrasing.")
    assert p.paraphrase("x", 0) == []  # nothing to generate: nothing loaded
    with pytest.raises(ValueError, match="model_id"):
        LLMParaphraser("")


@pytest.mark.slow
def test_llm_paraphraser_fails_clearly_offline(tmp_path):
    """The default model cannot be loaded offline (and an empty local dir is no model): a clear error."""
    code = (
        "from empriv.data.variants import LLMParaphraser, ParaphraserUnavailable\n"
        "import sys\n"
        "for mid in (sys.argv[1], 'meta-llama/Llama-3.1-8B-Instruct'):\n"
        "    try:\n"
        "        LLMParaphraser(mid).paraphrase('hello', 1)\n"
        "    except ParaphraserUnavailable as e:\n"
        "        assert 'cannot load paraphrasing model' in str(e) and repr(mid) in str(e), e\n"
        "    else:\n"
        "        raise SystemExit('no error for ' + mid)\n"
        "print('ok')\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
    assert issubclass(ParaphraserUnavailable, RuntimeError)
