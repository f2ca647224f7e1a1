"""empriv.secrets.canaries: the five designs, prefixes, membership, encoding, vocabulary extension."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from empriv.secrets.canaries import (
    BigramModel,
    CanarySet,
    encode_canaries,
    extend_vocabulary,
    generate_canaries,
    rarest_tokens,
    unigram_counts,
)
from tiny_models import tiny_gpt2

V, EOS = 300, 299


def zipf_corpus(n=400, seed=0):
    """Token sequences where low ids are frequent, ids ≥ 200 never occur, and 5 always follows 4."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        toks = np.minimum(rng.zipf(1.3, 12) - 1, 199)
        out.append([int(t) for t in toks] + [4, 5])
    return out


def make(design, **kw):
    args = dict(design=design, n_canaries=400, vocab_size=V, eos_id=EOS, seed=0, prefix_length=6, n_population=50,
                pool_size=20, train_token_lists=zipf_corpus())
    args.update(kw)
    return generate_canaries(**args)


@pytest.mark.parametrize("design", ["random", "unigram", "bigram", "model", "new_token"])
def test_every_design_shapes_labels_and_determinism(design):
    base = tiny_gpt2(vocab_size=V) if design == "model" else None
    cs = make(design, base_model=base, secret_length=2)
    assert len(cs.audit) == 400 and len(cs.population) == 50
    assert all(len(c.prefix) == 6 and len(c.secret) == 2 for c in cs.canaries)
    assert len({c.prefix for c in cs.canaries}) == 450  # unique prefixes
    assert all(EOS not in c.tokens for c in cs.canaries)
    frac = len(cs.members) / 400
    assert 0.4 < frac < 0.6  # Bernoulli(1/2)
    again = make(design, base_model=tiny_gpt2(vocab_size=V) if base else None, secret_length=2)
    assert again.canaries == cs.canaries  # seeded
    other = make(design, base_model=tiny_gpt2(vocab_size=V) if base else None, secret_length=2, seed=1)
    assert [c.member for c in other.audit] != [c.member for c in cs.audit]


def test_new_token_canaries_get_fresh_unshared_tokens():
    cs = make("new_token", secret_length=3)
    assert cs.n_new_tokens == 450 * 3 and cs.vocab_size == V + 1350
    secrets = [t for c in cs.canaries for t in c.secret]
    assert len(set(secrets)) == len(secrets) and min(secrets) == V and max(secrets) == V + 1349
    assert all(t < V for c in cs.canaries for t in c.prefix)


def test_unigram_secrets_come_from_the_rarest_tokens():
    corpus = zipf_corpus()
    counts = unigram_counts(corpus, V)
    pool = rarest_tokens(counts, 20, [EOS])
    never_seen = [t for t in np.nonzero(counts == 0)[0].tolist() if t != EOS]
    assert len(never_seen) >= 20 and pool.tolist() == never_seen[:20]  # never-seen ids first, by id
    cs = make("unigram")
    assert {t for c in cs.canaries for t in c.secret} <= set(pool.tolist())
    rnd = make("random")
    assert np.mean([counts[c.secret[0]] for c in cs.audit]) < np.mean([counts[c.secret[0]] for c in rnd.audit])


def test_bigram_secrets_are_unlikely_pairs():
    corpus = zipf_corpus()
    bigram = BigramModel(corpus, V, EOS)
    p = bigram.next_probs(4)
    assert p.argmax() == 5 and p.sum() == pytest.approx(1.0)
    cs = make("bigram", secret_length=2)
    rnd = make("random", secret_length=2)

    def mean_logp(canaries):
        return np.mean([np.log(bigram.next_probs(c.prefix[-1])[c.secret[0]]) + np.log(bigram.next_probs(c.secret[0])[c.secret[1]])
                        for c in canaries])

    assert mean_logp(cs.audit) < mean_logp(rnd.audit) - 1.0


def test_model_secrets_are_the_base_models_least_likely_continuations():
    from empriv.audit.canary_audit import canary_losses

    base = tiny_gpt2(vocab_size=V, n_positions=16)
    cs = make("model", base_model=base)
    rnd = make("random")
    nll_model, mask = canary_losses(base, cs.audit, EOS, 16, "sft")
    nll_rnd, mask_r = canary_losses(base, rnd.audit, EOS, 16, "sft")
    assert (nll_model * mask).sum(1).mean() > (nll_rnd * mask_r).sum(1).mean() + 0.1


def test_test_prefixes_are_windows_of_held_out_samples():
    test = [list(range(i, i + 20)) for i in range(0, 200, 10)]
    cs = make("random", prefix="test", test_token_lists=test, n_canaries=100, n_population=0)
    windows = {tuple(t[s : s + 6]) for t in test for s in range(15)}
    assert all(c.prefix in windows for c in cs.canaries) and len({c.prefix for c in cs.canaries}) == 100
    with pytest.raises(ValueError, match="fewer than"):
        make("random", prefix="test", test_token_lists=test[:2], n_canaries=100, n_population=0)


def test_encoding_sft_masks_the_secret_only_and_nwp_everything():
    cs = make("new_token", secret_length=2, n_canaries=4, n_population=0)
    c = cs.canaries[0]
    ids, mask = encode_canaries([c], EOS, 16, "sft")
    assert ids[0, :9].tolist() == [EOS, *c.prefix, *c.secret] and ids[0, 9:].eq(EOS).all()
    assert mask[0].nonzero().flatten().tolist() == [7, 8]
    _, mask = encode_canaries([c], EOS, 16, "nwp")
    assert mask[0].nonzero().flatten().tolist() == list(range(1, 9))
    with pytest.raises(ValueError, match="seq_len"):
        encode_canaries([c], EOS, 8, "sft")


def test_extend_vocabulary_adds_zero_rows_and_keeps_the_old_function():
    model = tiny_gpt2(vocab_size=V)
    ids = torch.tensor([[EOS, 1, 2, 3]])
    before = model(input_ids=ids).logits
    assert extend_vocabulary(model, 7) == V + 7
    emb = model.get_input_embeddings().weight
    assert emb.shape[0] == V + 7 and emb[V:].abs().sum() == 0
    assert model.get_output_embeddings().weight.data_ptr() == emb.data_ptr()  # still tied
    after = model(input_ids=ids).logits
    assert torch.allclose(after[..., :V], before, atol=1e-6)
    assert torch.allclose(after[..., V:], torch.zeros_like(after[..., V:]))  # logit 0 for every new token


def test_save_and_load_round_trip(tmp_path):
    cs = make("unigram", n_canaries=20, n_population=5)
    cs.save(tmp_path)
    back = CanarySet.load(tmp_path)
    assert back.canaries == cs.canaries and back.meta() == cs.meta()
    summary = cs.public_summary()
    assert summary["n_canaries"] == 20 and not any(isinstance(v, (list, dict)) for v in summary.values())


@pytest.mark.parametrize("field, value, allowed", [
    ("design", "fancy", "new_token"), ("prefix", "public", "random"), ("loss", "mse", "sft"),
    ("secret_length", 9, "[1, 8]"), ("n_canaries", 1, ">= 2"),
])
def test_invalid_settings_name_the_field_value_and_what_is_allowed(field, value, allowed):
    kw = {"design": "random", field: value}
    with pytest.raises(ValueError) as err:
        make(kw.pop("design"), **kw)
    assert f"canaries.{field}" in str(err.value) and str(value) in str(err.value) and allowed in str(err.value)


def test_a_canary_must_fit_the_window():
    with pytest.raises(ValueError, match="seq_len"):
        make("random", prefix_length=20, secret_length=8, seq_len=16)


def test_params_sections_validate():
    from empriv.config import ConfigError, parse_params

    cube = {"epsilon": [8], "batch_size": [8], "steps": [1], "learning_rate": [0.1], "seed": [0]}
    p = parse_params({"cube": cube})
    assert p.canaries.design == "new_token" and p.audit.guesses == 100
    assert [r.name for r in p.audit_runs()] == ["eps2-b128-T32-lr0.01-s0-full", "eps64-b128-T32-lr0.01-s0-full",
                                               "epsinf-b128-T32-lr0.01-s0-full"]
    with pytest.raises(ConfigError, match=r"canaries.design.*(got 'fancy')"):
        parse_params({"cube": cube, "canaries": {"design": "fancy"}})
    with pytest.raises(ConfigError, match="audit.guesses = 200 must be <= canaries.n_canaries = 100"):
        parse_params({"cube": cube, "canaries": {"n_canaries": 100}, "audit": {"guesses": 200}})
    with pytest.raises(ConfigError, match="base.seq_len"):
        parse_params({"cube": cube, "canaries": {"prefix_length": 64}})
    with pytest.raises(ConfigError, match="audit.cube.epsilon"):
        parse_params({"cube": cube, "audit": {"cube": {**cube, "epsilon": [-1]}}})


def test_bigram_canaries_need_a_token_pair():
    with pytest.raises(ValueError, match="secret_length must be >= 2 for design 'bigram'"):
        make("bigram", secret_length=1)
    from empriv.config import ConfigError, parse_params

    cube = {"epsilon": [8], "batch_size": [8], "steps": [1], "learning_rate": [0.1], "seed": [0]}
    with pytest.raises(ConfigError, match="bigram"):
        parse_params({"cube": cube, "canaries": {"design": "bigram"}})
    assert parse_params({"cube": cube, "canaries": {"design": "bigram", "secret_length": 2}}).canaries.secret_length == 2


# ----------------------------------------------------------------------------- canary count and membership
def test_the_number_of_audit_canaries_is_fixed_whatever_the_membership_draw():
    """m = n_canaries for every seed; only the number of members is random (independent Bernoulli(1/2))."""
    sets = [make("random", n_canaries=101, n_population=7, seed=s) for s in range(8)]
    assert {len(cs.audit) for cs in sets} == {101} and {len(cs.population) for cs in sets} == {7}
    assert {cs.meta()["n_canaries"] for cs in sets} == {101}
    members = [cs.meta()["n_members"] for cs in sets]
    assert len(set(members)) > 1 and all(m == len(cs.members) for m, cs in zip(members, sets))
    assert {cs.meta()["membership"] for cs in sets} == {"independent Bernoulli(1/2)"}
    # the labels of one set are independent coin flips: over 8 × 101 draws the member share is near 1/2
    assert abs(sum(members) / (8 * 101) - 0.5) < 0.05


# ----------------------------------------------------------------------------- leak check
def test_token_leaks_are_found_per_sample_and_reported_by_id_split_and_count():
    from empriv.secrets.leaks import find_token_leaks, leak_error

    seqs = {"c00000": (7, 8, 9), "c00001": (1, 2)}
    splits = {"train": [[5, 7, 8, 9, 7, 8, 9], [7, 8], [1, 2, 3]], "public": [[9, 1, 2], [0]]}
    leaks = find_token_leaks(seqs, splits)
    assert [(lk.secret_id, lk.split, lk.samples) for lk in leaks] == [
        ("c00000", "train", (0,)), ("c00001", "train", (2,)), ("c00001", "public", (0,))]
    assert leak_error(leaks, "canary") == ("leak check failed: 3 canary/split pairs found where no canary may occur: "
                                           "c00000 in 1 train sample, c00001 in 1 train sample, c00001 in 1 public sample")
    with pytest.raises(ValueError, match="sequence x has 1 tokens"):
        find_token_leaks({"x": (3,)}, splits)


def test_the_canaries_stage_fails_on_a_leaked_canary_and_leaves_its_outputs(tmp_path, monkeypatch, capsys):
    from empriv import paths
    from empriv.config import parse_params
    from empriv.io import read_json, read_jsonl, write_jsonl
    from empriv.models.tokenizer import Tokenizer
    from empriv.pipeline import canaries as stage
    from empriv.pipeline.prepare import main as prepare
    from empriv.pipeline.tokenizer import main as make_tokenizer
    from empriv.secrets.leaks import LeakError

    cube = {"epsilon": [8], "batch_size": [8], "steps": [1], "learning_rate": [0.1], "seed": [0]}
    params = parse_params({"cube": cube, "data": {"n_train": 100, "n_validation": 5, "n_test": 5, "n_public": 200,
                                                  "secret_frequencies": [0.05]},
                           "tokenizer": {"vocab_size": 400}, "audit": {"guesses": 10},
                           "canaries": {"design": "random", "n_canaries": 20, "n_population": 4, "prefix_length": 4}})
    monkeypatch.chdir(tmp_path)
    prepare(params)
    make_tokenizer(params)
    cs = stage.main(params)
    summary = read_json(paths.CANARIES_METRICS)
    assert summary["n_canaries"] == 20 and summary["membership"] == "independent Bernoulli(1/2)"
    assert summary["leak_check"] == {"n_checked": 24, "splits": {"train": 100, "validation": 5, "test": 5, "public": 200},
                                     "n_leaks": 0}
    before = (paths.CANARIES_DIR / "canaries.jsonl").read_bytes(), paths.CANARIES_METRICS.read_bytes()
    # a non-member canary written into the public split, as text that tokenises back to its tokens
    tok = Tokenizer.load(paths.TOKENIZER_DIR)
    leaked = next(c for c in cs.audit if not c.member and tok.encode(tok.decode(list(c.tokens))) == list(c.tokens))
    public = paths.split_path("public")
    write_jsonl(public, read_jsonl(public) + [{"id": "public-999999", "text": tok.decode(list(leaked.tokens))}])
    with pytest.raises(LeakError) as err:
        stage.main(params)
    assert str(err.value) == ("leak check failed: 1 canary/split pair found where no canary may occur: "
                              f"{leaked.id} in 1 public sample")
    assert ((paths.CANARIES_DIR / "canaries.jsonl").read_bytes(), paths.CANARIES_METRICS.read_bytes()) == before
    # new-token canaries cannot occur in any text: nothing to search
    nt = parse_params({**params.model_dump(), "canaries": {**params.canaries.model_dump(), "design": "new_token"}})
    assert read_json(paths.CANARIES_METRICS)["n_canaries"] == 20 and stage.main(nt).n_new_tokens == 24
    assert read_json(paths.CANARIES_METRICS)["leak_check"] == {"n_checked": 0, "splits": {}, "n_leaks": 0}
