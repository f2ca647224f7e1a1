"""Issue 43: ``secrets.overrides`` naming an id the corpus does not have, or a text the training data does not hold,
passed validation; the secrets stage then failed three times after the sweep had removed its outputs. Now
`empriv validate` says so (empriv.pipeline.override_checks), one line per override (its line and id, never its text),
before anything is touched."""

from __future__ import annotations

import json

from reliability_project import snapshot, write_enron_csv, write_tofu_jsonl


def _write_overrides(project, rows: list[dict]) -> None:
    (project.root / "overrides.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    project.set("secrets.overrides", "overrides.jsonl")


def _planted(project) -> dict[str, str]:
    """The planted secrets of the project's params, from the synthetic generator itself."""
    from empriv.config import load_params
    from empriv.data.synthetic import generate_corpus

    project.write_params()
    d = load_params(project.root / "params.yaml").data
    corpus = generate_corpus(d.n_train, d.n_validation, d.n_test, d.n_public, d.seed, tuple(d.secret_frequencies))
    return {s.id: s.text for s in corpus.secrets}


def _error_lines(project, proc, before) -> list[str]:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    after = snapshot(project.root)
    assert {k for k in set(before) | set(after) if before.get(k) != after.get(k)} <= {"params.yaml"}
    return proc.stderr.splitlines()


def test_synthetic_overrides_with_an_unknown_id_or_another_text_are_one_line_each(project):
    planted = _planted(project)
    assert sorted(planted) == [f"secret-{i:02d}" for i in range(len(planted))]  # one per data.secret_frequencies
    last = max(planted)
    good = planted["secret-00"]
    other = planted["secret-01"]
    _write_overrides(project, [
        {"id": "secret-00", "prompt": good[:3], "continuation": good[3:]},  # a split of the secret's own text
        {"id": "secret-99", "prompt": good[:3], "continuation": good[3:]},
        {"id": "secret-01", "prompt": other[:3], "continuation": other[3:] + " and more"},
    ])
    before = snapshot(project.root)
    lines = _error_lines(project, project.validate(), before)
    assert lines == [
        "error: secrets.overrides: overrides.jsonl line 2 (id secret-99): no planted secret has this id (allowed: the "
        f"planted secrets' ids, secret-00 … {last})",
        "error: secrets.overrides: overrides.jsonl line 3 (id secret-01): prompt + continuation does not occur in the "
        "training data, not the text of secret secret-01 (allowed: the secret's text split in two)"]
    for text in (good, other):  # secrets stay out of what is printed
        assert text not in lines[0] + lines[1]
    _write_overrides(project, [{"id": "secret-00", "prompt": good[:3], "continuation": good[3:]},
                               {"id": "secret-01", "prompt": other[:-4], "continuation": other[-4:]}])
    proc = project.validate()
    assert proc.returncode == 0, proc.stderr


def test_an_override_whose_text_is_another_secret_is_named_as_such(project):
    planted = _planted(project)
    text = planted["secret-02"]  # secret-02's text given for secret-03: in the training data, but not secret-03's
    _write_overrides(project, [{"id": "secret-03", "prompt": text[:4], "continuation": text[4:]}])
    line = project.fails_with_one_line(project.validate(), snapshot(project.root))
    assert line == ("error: secrets.overrides: overrides.jsonl line 1 (id secret-03): prompt + continuation is another "
                    "string of the training data, not the text of secret secret-03 (allowed: the secret's text split "
                    "in two)")


def test_enron_overrides_need_a_minable_id_and_a_text_of_the_training_split(project):
    path = write_enron_csv(project.root / "emails.csv", 40)  # 36 training e-mails, each body "w<i>x0 w<i>x1 …"
    project.set("data.source", "enron").set("data.path", path.name).set("data.n_train", 36)
    project.set("secrets.top_k", 50)
    _write_overrides(project, [
        {"id": "enron-000", "prompt": "x1", "continuation": " w"},  # in every body
        {"id": "enron-001", "prompt": "never", "continuation": " written"},
        {"id": "enron-50", "prompt": "x1", "continuation": " w"},
        {"id": "secret-00", "prompt": "x1", "continuation": " w"},
    ])
    before = snapshot(project.root)
    allowed = "(allowed: an id the mining gives, enron-000 … enron-049 (secrets.top_k = 50))"
    assert _error_lines(project, project.validate(), before) == [
        "error: secrets.overrides: overrides.jsonl line 2 (id enron-001): prompt + continuation does not occur in the "
        "training data (the first data.n_train = 36 cleaned e-mails of data.path; allowed: a string the mining finds "
        "there)",
        f"error: secrets.overrides: overrides.jsonl line 3 (id enron-50): not an id the secrets stage can mine {allowed}",
        f"error: secrets.overrides: overrides.jsonl line 4 (id secret-00): not an id the secrets stage can mine "
        f"{allowed}"]
    _write_overrides(project, [{"id": "enron-049", "prompt": "x1", "continuation": " w"}])
    proc = project.validate()
    assert proc.returncode == 0, proc.stderr


def test_tofu_takes_no_overrides(project):
    write_tofu_jsonl(project.root / "tofu.jsonl", 10)
    project.set("data.source", "tofu").set("data.path", "tofu.jsonl").set("data.n_train", 180)
    _write_overrides(project, [{"id": "author-000", "prompt": "a", "continuation": "b"}])
    line = project.fails_with_one_line(project.validate(), snapshot(project.root))
    assert line == ("error: secrets.overrides: overrides.jsonl: data.source tofu takes no overrides: its secrets are "
                    "author → genre pairs (got 1 override(s); allowed: secrets.overrides: null)")
