#!/usr/bin/env python
"""The pull-request report: what a change does to params, metrics and plots, as one markdown comment.

Used by .github/workflows/pr.yml, tested by tests/test_pr_report.py, described in docs/ci.md. Subcommands:

``cube --rev REV --preset FILE --work DIR --record FILE``
    checks REV out into the git worktree DIR, writes the preset over that revision's own params.yaml, runs
    ``dvc repro`` there (stage processes import DIR's ``src``, not the installed tree) with the checkout's DVC
    cache, commits what the stages wrote as a detached commit and records ``{rev, sha, commit, ran, restored}``
    in FILE. A stage whose command, dependencies and params already ran against that cache (an earlier cube, a
    restored CI cache, or ``run-cache fetch``) is restored from the run-cache instead of run.

``report --base REV --head REV --out DIR [--cube-base FILE --cube-head FILE] [--link URL]``
    writes DIR/comment.md, at most GitHub's 65,536 characters, verdicts first: ``empriv diff`` of the two cube
    results (its summary line, the metrics changed beyond their noise, new or gone, then those within noise, folded
    in ``<details>``; the unchanged ones counted), the same for the metrics committed at base and head when they differ, ``dvc params diff``
    between base and head, and the plots whose data differ between the cube results. Tables too long for the
    comment lose whole rows, with a note saying how many and where the rest is: the untrimmed diffs (``*.md``) and
    ``dvc plots diff``'s HTML (``plots/index.html``) are written beside comment.md for the workflow artifact.

``run-cache push|fetch [--remote NAME]``
    moves every run-cache entry and the outputs it restores to or from the DVC remote (``dvc push --run-cache``
    moves the entries only, so the other side would find the record of a run but not its outputs).

Nothing here knows empriv's file names: metrics, params and plots are whatever dvc.yaml declares.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

GITHUB_COMMENT_LIMIT = 65_536  # characters of one issue or pull-request comment
MARKER = "<!-- empriv-pr-report -->"  # first line of the comment: tells it apart from other comments
GIT_IDENTITY = ["-c", "user.name=empriv-pr-report", "-c", "user.email=pr-report@empriv.invalid"]
RAN = re.compile(r"Running stage '([^']+)'")
RESTORED = re.compile(r"Stage '([^']+)' is cached - skipping run")


class ReportError(RuntimeError):
    """A git or dvc command failed, or an input is unusable; the message is one line saying which."""


def _tool(name: str) -> str:
    """``dvc`` from the interpreter's own environment (the venv) if it is there, else from PATH."""
    local = Path(sys.executable).parent / name
    return str(local) if local.exists() else name


def run(cmd: list[str], cwd: Path, env: dict | None = None) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-1:] or ["no output"]
        raise ReportError(f"`{' '.join(cmd)}` failed in {cwd} (exit {proc.returncode}): {tail[0]}")
    return proc.stdout


def git(args: list[str], cwd: Path) -> str:
    return run(["git", *args], cwd).strip()


def dvc(args: list[str], cwd: Path, env: dict | None = None) -> str:
    return run([_tool("dvc"), *args], cwd, env)


def size(text: str) -> int:
    """What counts against the comment limit: UTF-8 bytes, never fewer than the characters GitHub counts."""
    return len(text.encode("utf-8"))


# ----------------------------------------------------------------------------- the cube at one revision
def stage_env(work: Path) -> dict:
    """The environment of the cube's ``dvc repro``: the venv's tools first, the worktree's ``src`` importable
    ahead of the installed tree, W&B offline unless the caller chose otherwise."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    if (work / "src").is_dir():
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(work / "src"), env.get("PYTHONPATH")]))
    env.setdefault("WANDB_MODE", "offline")
    return env


def run_cube(root: Path, rev: str, preset: Path, work: Path) -> dict:
    """Run ``preset`` over ``rev``'s params in the worktree ``work`` and commit the result (module docstring)."""
    import yaml

    from empriv.study import merge

    root, work = root.resolve(), work.resolve()
    overlay = yaml.safe_load(preset.read_text(encoding="utf-8"))
    if not isinstance(overlay, dict):
        raise ReportError(f"preset {preset} must be a mapping of params sections, got {type(overlay).__name__}")
    sha = git(["rev-parse", "--verify", f"{rev}^{{commit}}"], root)
    git(["worktree", "prune"], root)
    if work.exists():
        git(["worktree", "remove", "--force", str(work)], root)
    git(["worktree", "add", "--detach", str(work), sha], root)
    cache = dvc(["cache", "dir"], root).strip()
    (work / ".dvc" / "config.local").write_text(f"[cache]\n    dir = {cache}\n", encoding="utf-8")
    params_file = work / "params.yaml"
    params = yaml.safe_load(params_file.read_text(encoding="utf-8")) if params_file.exists() else {}
    params_file.write_text(f"# {preset.name} over params.yaml of {sha[:12]} (tools/pr_report.py cube)\n"
                           + yaml.safe_dump(merge(params or {}, overlay), sort_keys=False), encoding="utf-8")
    proc = subprocess.run([_tool("dvc"), "repro"], cwd=work, env=stage_env(work), capture_output=True, text=True)
    log = proc.stdout + proc.stderr
    (work / ".pr_report_repro.log").write_text(log, encoding="utf-8")
    if proc.returncode != 0:
        sys.stderr.write(log[-4000:])
        raise ReportError(f"`dvc repro` of {preset.name} at {sha[:12]} failed (exit {proc.returncode}); "
                          f"log: {work / '.pr_report_repro.log'}")
    git(["add", "-A", "--", ".", ":!.pr_report_repro.log"], work)
    uncached = uncached_outputs(work)
    if uncached:  # metrics, plots and reports that .gitignore hides: the diffs read them from the commit
        git(["add", "-f", "--", *uncached], work)
    git([*GIT_IDENTITY, "commit", "-q", "--allow-empty", "--no-verify", "-m",
         f"pr_report cube: {preset.name} at {sha}"], work)
    return {"rev": rev, "sha": sha, "commit": git(["rev-parse", "HEAD"], work), "preset": preset.name,
            "ran": RAN.findall(log), "restored": RESTORED.findall(log)}


def uncached_outputs(work: Path) -> list[str]:
    """The existing outputs declared ``cache: false`` in the worktree's dvc.yaml (paths relative to it)."""
    from empriv.infra.dvc_remote import uncached_outputs as outputs

    return outputs(work)


def push_run_cache(root: Path, remote: str | None = None) -> dict:
    """Every run-cache entry of ``root``'s DVC cache and every object those entries restore, to the remote.

    ``dvc push --run-cache`` (DVC 3.67) sends the entries only, so another machine finds the record of a stage
    run but not its outputs, and runs the stage again; this sends both, with DVC's own StageCache and data
    cloud (:func:`empriv.infra.dvc_adapter.push_run_cache`)."""
    from empriv.infra.dvc_remote import push_run_cache as push

    moved = push(root, remote)
    if moved.failed:
        raise ReportError(f"{moved.failed} run-cache objects could not be pushed to the DVC remote")
    return {"entries": moved.entries, "objects": moved.transferred}


def fetch_run_cache(root: Path, remote: str | None = None) -> dict:
    """The remote's run-cache entries and the objects they restore, into ``root``'s DVC cache: a later
    ``dvc repro`` against that cache restores those stage runs instead of running them."""
    from empriv.infra.dvc_remote import pull_run_cache

    moved = pull_run_cache(root, remote)
    if moved.failed:
        raise ReportError(f"{moved.failed} run-cache objects are missing on the DVC remote")
    return {"entries": moved.entries, "objects": moved.transferred}


# ----------------------------------------------------------------------------- markdown tables, trimmed by rows
def split_tables(text: str) -> list[tuple[str, list[str]]]:
    """``text`` as blocks: ("text", lines) or ("table", lines) for each run of lines that start with ``|``."""
    blocks: list[tuple[str, list[str]]] = []
    for line in text.rstrip("\n").split("\n") if text.strip() else []:
        kind = "table" if line.lstrip().startswith("|") else "text"
        if blocks and blocks[-1][0] == kind:
            blocks[-1][1].append(line)
        else:
            blocks.append((kind, [line]))
    return blocks


def trim_table(markdown: str, budget: int, where: str) -> str:
    """``markdown`` (dvc's ``--md`` output: one table) cut to at most ``budget`` bytes by dropping whole rows from
    the end; a note after the table says how many rows are missing, from which files, and ``where`` they are."""
    if size(markdown) <= budget:
        return markdown
    blocks = split_tables(markdown)
    if [kind for kind, _ in blocks] != ["table"] or len(blocks[0][1]) < 3:
        raise ReportError(f"expected one markdown table to trim, got blocks {[kind for kind, _ in blocks]}")
    header, rows = blocks[0][1][:2], blocks[0][1][2:]
    files = [r.strip().strip("|").split("|")[0].strip() for r in rows]  # the first column: the file (Path)
    first = {f: files.index(f) for f in dict.fromkeys(files)}

    def note(dropped: Counter) -> str:
        per_file = ", ".join(f"{dropped[f]} of {f}" for f in sorted(dropped, key=first.__getitem__))
        return (f"\n_{sum(dropped.values())} of {len(rows)} rows not shown (a PR comment holds "
                f"{GITHUB_COMMENT_LIMIT:,} characters): {per_file}. {where}_\n")

    kept = size("\n".join(header)) + sum(size(r) + 1 for r in rows)  # header + rows, each row after a newline
    dropped: Counter = Counter()
    keep = len(rows)
    while keep > 0 and kept + 1 + size(note(dropped)) > budget:
        keep -= 1
        kept -= size(rows[keep]) + 1
        dropped[files[keep]] += 1
    text = "\n".join(header + rows[:keep]) + "\n" + note(dropped)
    if size(text) > budget:
        raise ReportError(f"a budget of {budget} bytes cannot hold even the table's header and its note")
    return text


def relabel(markdown: str, labels: dict[str, str]) -> str:
    """The table's header row with each cell equal to a key of ``labels`` renamed (dvc names columns by revision);
    a table without rows (dvc prints one when both revisions are the same) is no table: ""."""
    if not any(kind == "table" and len(lines) > 2 for kind, lines in split_tables(markdown)):
        return ""
    lines = markdown.split("\n")
    if lines and lines[0].startswith("|"):
        cells = lines[0].strip("|").split("|")
        lines[0] = "|" + "|".join(f" {labels.get(c.strip(), c.strip())} " for c in cells) + "|"
    return "\n".join(lines)


def allocate(sizes: list[int], budget: int) -> list[int]:
    """Share ``budget`` among parts of the given sizes: small parts whole, the rest split evenly (water-filling)."""
    shares = [0] * len(sizes)
    left = budget
    order = sorted(range(len(sizes)), key=lambda i: sizes[i])
    for n, i in enumerate(order):
        shares[i] = min(sizes[i], left // (len(order) - n))
        left -= shares[i]
    return shares


# ----------------------------------------------------------------------------- plots whose data changed
def _datapoints(entry: dict) -> list[dict]:
    """The data of one vega plot in ``dvc plots diff --json --split`` (or, without --split, inside its spec)."""
    anchors = entry.get("anchor_definitions") or {}
    for key, value in anchors.items():
        if "DATA" in key and isinstance(value, list):
            return value
    content = entry.get("content") or {}
    data = content.get("data") if isinstance(content, dict) else None
    return data.get("values", []) if isinstance(data, dict) else []


def changed_plots(root: Path, a: str, b: str) -> list[tuple[str, str]]:
    """(plot, what) for every plot whose data differ between revisions ``a`` and ``b``: what is "changed",
    "added" (only at ``b``) or "removed" (only at ``a``); images compare by content, vega plots by data points."""
    with tempfile.TemporaryDirectory(prefix="pr_report_plots.") as images:  # --json writes image plots there
        return _changed(json.loads(dvc(["plots", "diff", a, b, "--json", "--split", "-o", images], root) or "{}"), a, b)


def _changed(out: dict, a: str, b: str) -> list[tuple[str, str]]:
    found = []
    for name, entries in sorted((out.get("data") or {}).items()):
        by_rev: dict[str, list[str]] = {}
        for entry in entries:
            if entry.get("type") == "image":
                url = entry.get("url")
                content = hashlib.sha256(Path(url).read_bytes()).hexdigest() if url and Path(url).is_file() else str(url)
                for rev in entry.get("revisions", []):
                    by_rev.setdefault(rev, []).append(content)
            else:
                for point in _datapoints(entry):
                    point = dict(point)
                    rev = point.pop("rev", None)
                    by_rev.setdefault(rev, []).append(json.dumps(point, sort_keys=True, default=str))
        if len(by_rev) == 1:
            (rev,) = by_rev
            found.append((name, "added" if rev == b else "removed" if rev == a else f"only at {rev}"))
        elif len({tuple(sorted(points)) for points in by_rev.values()}) > 1:
            found.append((name, "changed"))
    return found


# ----------------------------------------------------------------------------- the comment
def short(rev: str, root: Path) -> str:
    return git(["rev-parse", "--short=8", f"{rev}^{{commit}}"], root)


def _cube_line(label: str, record: dict) -> str:
    ran, restored = len(record.get("ran", [])), len(record.get("restored", []))
    how = ("computed" if not restored else "restored from the DVC run-cache" if not ran else
           "partly restored from the DVC run-cache")
    return f"{label} `{record['sha'][:8]}`: {how} ({ran} stages run, {restored} restored)"


def metrics_sections(rows, title: str, intro: str, labels: tuple[str, str], nothing: str) -> list[tuple]:
    """The comment's sections of one ``empriv diff`` (:mod:`empriv.diff` rows): the title with the summary line of
    ``empriv diff`` (the counts of each verdict) and the table of the changed, new and gone metrics, then the metrics
    within noise as a table folded in ``<details>`` (each table trimmed by rows when the comment is too long); the
    unchanged ones are only counted."""
    from empriv.diff import loud_rows, markdown_table, summary_line

    loud = loud_rows(rows)
    quiet = [r for r in rows if r.verdict == "within noise"]
    out = [(f"### {title}\n\n{intro}\n\n**{summary_line(rows)}**\n", markdown_table(loud, *labels),
            "" if loud else f"{nothing}\n")]
    if quiet:
        out.append((f"<details><summary>{len(quiet)} metrics within noise</summary>\n", markdown_table(quiet, *labels),
                    "</details>\n"))
    return out


def build_report(root: Path, base: str, head: str, *, cube_base: dict | None = None, cube_head: dict | None = None,
                 link: str | None = None, base_name: str | None = None, limit: int = GITHUB_COMMENT_LIMIT,
                 out: Path | None = None) -> str:
    """The comment's markdown (at most ``limit`` bytes); with ``out``, also comment.md, the untrimmed diffs and the
    plots' HTML written there. ``cube_base``/``cube_head`` are :func:`run_cube`'s records (both or neither).

    The verdicts lead: the metrics of the two cubes (``empriv diff``: changed, new, gone; the rest folded as within
    noise), the committed metrics when the PR moves them, then the params diff and the plots."""
    from empriv.diff import diff_revisions, format_markdown

    root = root.resolve()
    if (cube_base is None) != (cube_head is None):
        raise ReportError("give both cube records (base and head) or neither")
    cubes = cube_base is not None
    b, h = short(base, root), short(head, root)
    where = f"The full table is in the workflow artifact: {link}" if link else "The full table is in the workflow artifact."
    artifact = f"the workflow artifact ({link})" if link else "the workflow artifact"

    def verdicts(rev_a: str, rev_b: str):
        try:
            return diff_revisions(root, rev_a, rev_b)
        except ValueError as err:
            raise ReportError(str(err)) from err

    # revisions by their short hashes, the columns then named base/PR
    labels = {b: f"base {b}", h: f"PR {h}"}
    full = {"params_diff.md": relabel(dvc(["params", "diff", b, h, "--md"], root), labels)}
    sections = [(f"{MARKER}\n## Metrics, params and plots: this PR ({h}) against {base_name or 'its base'} ({b})\n",
                 None, "")]
    if cubes:
        rows = verdicts(cube_base["commit"], cube_head["commit"])
        full["metrics_diff.md"] = format_markdown(rows, "base cube", "PR cube", show_all=True)
        sections += metrics_sections(
            rows, "Metrics of the CI cube",
            f"`empriv diff` of the preset `{cube_head.get('preset')}` run over each side's params.yaml (the preset's "
            f"keys win on both sides): changed = beyond 3 combined standard errors (docs/sweeps.md). "
            f"{_cube_line('Base', cube_base)}; {_cube_line('PR', cube_head)}.",
            ("base cube", "PR cube"), "No metric of the cube changed beyond its noise.")
    committed = verdicts(b, h)
    full["committed_metrics_diff.md"] = format_markdown(committed, f"base {b}", f"PR {h}", show_all=True)
    if any(r.verdict != "unchanged" for r in committed):
        sections += metrics_sections(committed, "Committed metrics",
                                     "This PR changes metrics committed to git (`empriv diff`, base against this PR).",
                                     (f"base {b}", f"PR {h}"), "None beyond its noise.")
    sections.append(("### Params\n\n`dvc params diff` of every params file, base against this PR.\n",
                     full["params_diff.md"], "" if full["params_diff.md"].strip() else "No param changed.\n"))
    if cubes:
        words = {"added": "only in the PR", "removed": "only in the base"}
        try:
            plots = changed_plots(root, cube_base["commit"], cube_head["commit"])
            listing = "".join(f"- `{name}`: {words.get(what, what)}\n" for name, what in plots)
            text = (f"{len(plots)} plot(s) of the cube whose data changed; base and PR on one chart in "
                    f"`plots/index.html` of {artifact}.\n\n{listing}" if plots
                    else f"No plot's data changed (all plots, base and PR: `plots/index.html` of {artifact}).\n")
        except ReportError as err:
            text = f"The plots could not be compared: {err}\n"
        sections.append(("### Plots\n", None, text))

    def render(tables: list[str | None]) -> str:
        parts = []
        for (before, _, after), table in zip(sections, tables):
            parts.append(before + ("\n" + table.rstrip("\n") + "\n" if table and table.strip() else "")
                         + ("\n" + after if after else ""))
        return "\n".join(parts)

    tables = [t if t and t.strip() else None for _, t, _ in sections]
    room = limit - size(render([None] * len(tables))) - 2 * sum(1 for t in tables if t)  # "\n" table "\n"
    if room < 0:
        raise ReportError(f"the comment's text without tables already exceeds the limit of {limit} bytes")
    shares = iter(allocate([size(t) for t in tables if t], room))
    body = render([trim_table(t, next(shares), where) if t else None for t in tables])
    if size(body) > limit:
        raise ReportError(f"the comment came out at {size(body)} bytes, over the limit of {limit}")
    if out is not None:
        write_outputs(root, out, body, full, cube_base, cube_head)
    return body


def write_outputs(root: Path, out: Path, comment: str, full: dict[str, str], cube_base: dict | None,
                  cube_head: dict | None) -> None:
    """comment.md, the untrimmed diffs and (with cube records) ``dvc plots diff``'s HTML, each replaced whole."""
    from empriv.io import atomic_dir, atomic_path

    out.mkdir(parents=True, exist_ok=True)
    for name, text in {**full, "comment.md": comment}.items():
        with atomic_path(out / name) as tmp:
            tmp.write_text(text, encoding="utf-8")
    if cube_base and cube_head:
        with atomic_dir(out / "plots") as tmp:
            dvc(["plots", "diff", cube_base["commit"], cube_head["commit"], "-o", str(tmp)], root)


# ----------------------------------------------------------------------------- command line
def _record(path: str) -> dict:
    try:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ReportError(f"cube record {path} is unreadable: {err}") from err
    missing = [k for k in ("sha", "commit") if k not in record]
    if missing:
        raise ReportError(f"cube record {path} lacks {missing}; it must be written by `pr_report.py cube`")
    return record


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pr_report.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("cube", help="run a preset at a revision in a worktree and commit the result")
    c.add_argument("--rev", required=True)
    c.add_argument("--preset", required=True, type=Path)
    c.add_argument("--work", required=True, type=Path, help="the worktree (replaced if it exists)")
    c.add_argument("--record", required=True, type=Path, help="JSON file: rev, sha, result commit, stages run/restored")
    r = sub.add_parser("report", help="write the PR comment and the untrimmed diffs")
    r.add_argument("--base", required=True)
    r.add_argument("--head", default="HEAD")
    r.add_argument("--base-name", help="the base branch's name, for the title")
    r.add_argument("--cube-base", help="record of `cube` at the base")
    r.add_argument("--cube-head", help="record of `cube` at the head")
    r.add_argument("--link", help="where the workflow artifact is (the run's page)")
    r.add_argument("--limit", type=int, default=GITHUB_COMMENT_LIMIT, help="bytes the comment may hold")
    r.add_argument("--out", required=True, type=Path)
    rc = sub.add_parser("run-cache", help="move the run-cache, with the outputs it restores, to or from the remote")
    rc.add_argument("direction", choices=["push", "fetch"])
    rc.add_argument("--remote", help="DVC remote name (default: the default remote)")
    for p in (c, r, rc):
        p.add_argument("--root", type=Path, default=Path("."), help="the repository (default: .)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "cube":
            if not args.preset.is_file():
                raise ReportError(f"--preset {args.preset} does not exist")
            record = run_cube(args.root, args.rev, args.preset, args.work)
            from empriv.io import write_json

            write_json(args.record, record)
            print(record["commit"])
        elif args.command == "run-cache":
            move = push_run_cache if args.direction == "push" else fetch_run_cache
            try:
                moved = move(args.root, args.remote)
            except ReportError:
                raise
            except Exception as err:  # DVC's own errors: no remote, unreachable remote, ...
                raise ReportError(f"run-cache {args.direction}: {type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else 'no message'}") from err
            print(f"run-cache {args.direction}: {moved['entries']} stage runs, {moved['objects']} objects")
        else:
            if args.limit < 1000:
                raise ReportError(f"--limit must be >= 1000 bytes, got {args.limit}")
            cube_base = _record(args.cube_base) if args.cube_base else None
            cube_head = _record(args.cube_head) if args.cube_head else None
            comment = build_report(args.root, args.base, args.head, cube_base=cube_base, cube_head=cube_head,
                                   link=args.link, base_name=args.base_name, limit=args.limit, out=args.out)
            print(f"{args.out / 'comment.md'}: {size(comment)} bytes")
    except ReportError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
