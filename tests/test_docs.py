"""The documentation is checked against the code: README.md and docs/*.md.

- docs/params.md lists every key of the typed config (``empriv.config.Params`` and its nested sections,
  read at test time) with its type and default, and no key that does not exist;
- every params key named in inline code anywhere in the docs exists;
- README.md stays short, its set-up commands are Makefile targets and it holds CI's test command;
- every relative link (and anchor) in README.md and docs/*.md resolves.

``python tests/test_docs.py`` prints the table rows docs/params.md should have (to paste after a config change).
"""

from __future__ import annotations

import math
import re
import types
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PARAMS_DOC = DOCS / "params.md"
MAX_README_LINES = 160


# ----------------------------------------------------------------------------- the config, walked
def render_type(t) -> str:
    """A field's annotation in the words of docs/params.md: int, str or null, {a, b}, list of int, …"""
    origin = typing.get_origin(t)
    if origin is typing.Annotated:
        return render_type(typing.get_args(t)[0])
    if origin is typing.Literal:
        return "{" + ", ".join(str(a) for a in typing.get_args(t)) + "}"
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(t)
        text = " or ".join(render_type(a) for a in args if a is not type(None))
        return text + " or null" if type(None) in args else text
    if origin is list:
        (item,) = typing.get_args(t)
        inner = render_type(item)
        return f"list of ({inner})" if " or " in inner else f"list of {inner}"
    return getattr(t, "__name__", str(t))


def render_value(v) -> str:
    """A default as YAML would spell it: null, true, inf, [a, b]."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and math.isinf(v):
        return "inf"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(render_value(x) for x in v) + "]"
    return str(v)


def _section(annotation):
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def config_keys(model: type[BaseModel], prefix: str = "", defaults: BaseModel | None = None):
    """(key, type, default) of every leaf field of ``model``; nested sections are walked, their defaults
    taken from the parent's default instance (so ``audit.cube.epsilon`` has one, ``cube.epsilon`` none)."""
    for name, field in model.model_fields.items():
        key = prefix + name
        if defaults is not None:
            default = getattr(defaults, name)
        elif field.default is not PydanticUndefined:
            default = field.default
        elif field.default_factory is not None:
            default = field.default_factory()
        else:
            default = PydanticUndefined
        sub = _section(field.annotation)
        if sub is not None:
            yield from config_keys(sub, key + ".", None if default is PydanticUndefined else default)
        else:
            yield key, render_type(field.annotation), "required" if default is PydanticUndefined else render_value(default)


def config_sections(model: type[BaseModel], prefix: str = ""):
    for name, field in model.model_fields.items():
        sub = _section(field.annotation)
        if sub is not None:
            yield prefix + name
            yield from config_sections(sub, prefix + name + ".")


def _params_model():
    from empriv.config import Params

    return Params


def expected_rows() -> dict[str, tuple[str, str]]:
    return {key: (typ, default) for key, typ, default in config_keys(_params_model())}


# ----------------------------------------------------------------------------- docs/params.md, parsed
ROW = re.compile(r"^\|\s*`(?P<key>[a-z_][a-z0-9_.]*)`\s*\|(?P<type>[^|]*)\|(?P<default>[^|]*)\|(?P<meaning>.*)\|\s*$")


def documented_rows(text: str) -> dict[str, tuple[str, str, str]]:
    rows: dict[str, tuple[str, str, str]] = {}
    for line in text.splitlines():
        m = ROW.match(line)
        if m is None:
            continue
        key = m["key"]
        assert key not in rows, f"docs/params.md lists {key} twice"
        default = m["default"].strip()
        if default.startswith("`") and default.endswith("`"):
            default = default[1:-1]
        rows[key] = (m["type"].strip(), default, m["meaning"].strip())
    return rows


def row_for(key: str, typ: str, default: str) -> str:
    shown = default if default == "required" else f"`{default}`"
    return f"| `{key}` | {typ} | {shown} | … |"


def test_render_type_and_value_spell_the_docs_words():
    assert render_type(int | None) == "int or null"
    assert render_type(typing.Literal["fp32", "bf16"]) == "{fp32, bf16}"
    assert render_type(list[int | float]) == "list of (int or float)"
    assert render_type(typing.Annotated[int, "meta"]) == "int"
    assert render_type(int | typing.Literal["auto"]) == "int or {auto}"
    assert render_value([2, 64, math.inf]) == "[2, 64, inf]"
    assert render_value(None) == "null" and render_value(False) == "false" and render_value(1e-5) == "1e-05"


def test_config_walk_reaches_nested_sections_and_their_defaults():
    rows = expected_rows()
    assert rows["cube.epsilon"][1] == "required"  # the main cube has no default
    assert rows["audit.cube.epsilon"][1] != "required"  # the audit cube's comes from its default instance
    assert "train.lora.rank" in rows and "score.acr.top_k" in rows
    assert "train.lora" not in rows and "score.acr" not in rows  # sections are headings, not keys


def test_params_doc_lists_exactly_the_config_keys():
    documented = documented_rows(PARAMS_DOC.read_text(encoding="utf-8"))
    expected = expected_rows()
    missing = [k for k in expected if k not in documented]
    unknown = sorted(set(documented) - set(expected))
    assert not missing, "docs/params.md lacks these config keys; add rows:\n" + "\n".join(
        row_for(k, *expected[k]) for k in missing)
    assert not unknown, f"docs/params.md names keys the config does not have: {unknown}"


def test_params_doc_types_and_defaults_match_the_config():
    documented = documented_rows(PARAMS_DOC.read_text(encoding="utf-8"))
    wrong = [(k, documented[k][:2], exp) for k, exp in expected_rows().items() if k in documented and documented[k][:2] != exp]
    assert not wrong, "docs/params.md disagrees with the config (key, documented (type, default), config's):\n" + "\n".join(
        f"{k}: {doc} != {exp}   -> {row_for(k, *exp)}" for k, doc, exp in wrong)
    empty = [k for k, (_, _, meaning) in documented.items() if not meaning or meaning == "…"]
    assert not empty, f"docs/params.md has no meaning for {empty}"


def test_documented_rows_rejects_a_key_listed_twice():
    with pytest.raises(AssertionError, match="twice"):
        documented_rows("| `a.b` | int | `1` | x |\n| `a.b` | int | `1` | y |\n")


# ----------------------------------------------------------------------------- params keys named anywhere in the docs
INLINE_CODE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
FILE_SUFFIX = re.compile(r"\.(py|json|jsonl|csv|md|yaml|yml|html|png|txt|lock|toml)$")


def _doc_files() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def _strip_fences(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def params_mentions(text: str, sections: set[str]) -> set[str]:
    """Dotted names in inline code whose first part is a params section: `score.acr.top_k`,
    `secrets.filter: true`, `cube.epsilon[0]`, `train.lora.*` (→ train.lora)."""
    found = set()
    for span in INLINE_CODE.findall(_strip_fences(text)):
        name = re.split(r"[\s:=\[(,]", span.strip(), maxsplit=1)[0].removesuffix(".*").removesuffix("'s")
        if "/" in name or FILE_SUFFIX.search(name) or not re.fullmatch(r"[a-z_]+(\.[a-z0-9_]+)+", name):
            continue
        if name.split(".", 1)[0] in sections:
            found.add(name)
    return found


def test_every_params_key_named_in_the_docs_exists():
    model = _params_model()
    top = set(model.model_fields)
    from empriv.config import RAW_INPUTS

    known = set(expected_rows()) | set(config_sections(model)) | {f"inputs.{key}" for key in RAW_INPUTS}
    bad = {f.relative_to(ROOT).as_posix(): sorted(params_mentions(f.read_text(encoding="utf-8"), top) - known)
           for f in _doc_files()}
    bad = {f: keys for f, keys in bad.items() if keys}
    assert not bad, f"the docs name params keys that do not exist: {bad}"


def test_params_mentions_finds_keys_and_skips_files_and_modules():
    text = ("`score.acr.top_k` `secrets.filter: true` `cube.epsilon[0]` `train.lora.*` `records/base.json` "
            "`empriv.privacy` `data.py`\n```\n`cube.nothing`\n```\n")
    assert params_mentions(text, {"score", "secrets", "cube", "train", "data"}) == {
        "score.acr.top_k", "secrets.filter", "cube.epsilon", "train.lora"}


# ----------------------------------------------------------------------------- README: short, honest commands
def test_readme_is_short():
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= MAX_README_LINES, f"README.md has {n} lines; keep it at most {MAX_README_LINES} and move detail to docs/"


def _makefile():
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([A-Za-z][\w.-]*)\s*:(?!=)", text, flags=re.M))
    variables = set(re.findall(r"^([A-Z_][A-Z0-9_]*)\s*[?:+]?=", text, flags=re.M))
    return targets, variables


def _setup_section(readme: str) -> str:
    m = re.search(r"^## [^\n]*(?:set-up|setup|quickstart)[^\n]*\n(.*?)(?=^## )", readme, flags=re.S | re.M | re.I)
    assert m, "README.md has no set-up section (a '## ' heading with 'Set-up', 'Setup' or 'Quickstart')"
    return m.group(1)


def make_invocations(text: str) -> list[tuple[list[str], list[str]]]:
    """(targets, variables) of every `make …` command in the text (code blocks and inline code)."""
    calls = []
    for line in re.findall(r"(?:^|`)\s*(make(?:\s+[^`#\n]*)?)", text, flags=re.M):
        words = re.findall(r"(?:[^\s'\"]+|'[^']*'|\"[^\"]*\")+", line)[1:]
        words = [w for w in words if w not in ("…", "...")]
        variables = [w.split("=", 1)[0] for w in words if "=" in w]
        targets = [w for w in words if "=" not in w and not w.startswith(("-", "'", '"'))]
        calls.append((targets, variables))
    return calls


def test_readme_setup_commands_are_makefile_targets():
    targets, variables = _makefile()
    calls = make_invocations(_setup_section(README.read_text(encoding="utf-8")))
    named = {t for ts, _ in calls for t in ts}
    assert {"repro", "test"} <= named, f"the set-up section must show `make repro` and `make test`, shows {sorted(named)}"
    assert named <= targets, f"the README's set-up names make targets the Makefile lacks: {sorted(named - targets)}"
    used = {v for _, vs in calls for v in vs}
    assert used <= variables, f"the README's set-up sets Makefile variables that do not exist: {sorted(used - variables)}"


def test_readme_shows_ci_test_command_verbatim():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    commands = [line.strip() for line in ci.splitlines() if line.strip().startswith("make")]
    assert commands, ".ci/run calls no make command"
    setup = _setup_section(README.read_text(encoding="utf-8"))
    code_lines = {line.split("#", 1)[0].strip() for block in re.findall(r"```[^\n]*\n(.*?)```", setup, flags=re.S)
                  for line in block.splitlines()}
    for command in commands:
        assert command in code_lines, f"CI runs {command!r}; the README's set-up must show exactly that command"


def test_make_invocations_parses_targets_and_variables():
    text = "```bash\nmake repro TORCH_SPEC='torch==2 --index-url x'  # run\nmake test\n```\n`make PYTHON=python3.12 …` and `make clean-venv`"
    assert make_invocations(text) == [(["repro"], ["TORCH_SPEC"]), (["test"], []), ([], ["PYTHON"]), (["clean-venv"], [])]


# ----------------------------------------------------------------------------- links
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (word characters, spaces and hyphens
    kept), spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in _strip_fences(path.read_text(encoding="utf-8")).splitlines():
        m = re.match(r"^#{1,6}\s+(.+?)\s*#*\s*$", line)
        if m:
            s = slug(m.group(1))
            n = seen.get(s, 0)
            seen[s] = n + 1
            out.add(s if n == 0 else f"{s}-{n}")
    return out


def broken_links(path: Path) -> list[str]:
    bad = []
    for target in LINK.findall(_strip_fences(path.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            bad.append(f"{target} (no file {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest})")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target} (no heading with anchor #{anchor} in {dest.name})")
    return bad


def test_slug_matches_github_anchors():
    assert slug("ACR cost") == "acr-cost"
    assert slug("Accountants (`privacy.accountant`, `--accountant`)") == "accountants-privacyaccountant---accountant"
    assert slug("3. Presets (params overlays)") == "3-presets-params-overlays"
    assert slug("ε lower bounds") == "ε-lower-bounds"


def test_broken_links_finds_missing_files_and_anchors(tmp_path):
    (tmp_path / "a.md").write_text("# Top\n## Sub part\n[ok](b.md#sub-part) [self](#top) [web](https://x.y)\n"
                                   "[gone](c.md) [bad](b.md#nope)\n```\n[in code](zzz.md)\n```\n", encoding="utf-8")
    (tmp_path / "b.md").write_text("# B\n## Sub part\n", encoding="utf-8")
    bad = broken_links(tmp_path / "a.md")
    assert len(bad) == 2 and bad[0].startswith("c.md") and bad[1].startswith("b.md#nope")


@pytest.mark.parametrize("path", _doc_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(path):
    assert not broken_links(path), f"{path.relative_to(ROOT)} has broken links: {broken_links(path)}"


def test_docs_pages_are_reachable_from_the_readme():
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in LINK.findall(README.read_text(encoding="utf-8"))}
    orphans = [p.name for p in DOCS.glob("*.md") if p.resolve() not in linked]
    assert not orphans, f"docs pages the README does not link: {orphans}"


if __name__ == "__main__":
    for key, typ, default in config_keys(_params_model()):
        print(row_for(key, typ, default))
