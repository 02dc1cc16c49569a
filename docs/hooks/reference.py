"""MkDocs hooks of the documentation site (mkdocs.yml ``hooks:``): the reference generated from
the code, and links into the repository.

* A page holding ``<!-- shardtrain:NAME -->`` gets the table NAME in its place, rendered from
  the definitions the code uses, never from a copy:

  - ``pipeline-parameters``: every parameter of the pipeline ``csv_to_model``
    (:data:`shardtrain.kubeflow.parameters.PIPELINE`: name, type, default, description);
  - ``component-parameters``: each component's inputs and outputs, with the pipeline
    parameter each receives (the lists ``PLAN_SHARDS`` ... ``DEPLOY`` of the same module);
  - ``metadata``: the keys of ``metadata.json``, from the fields and the ``Attributes:``
    docstrings of :class:`shardtrain.data.metadata.DatasetMetadata` and its parts.

* A relative link to a file of the repository outside ``docs/`` (``../benchmarks/RESULTS.md``,
  which resolves on disk and on GitHub) becomes a link to that file at ``repo_url``; one to a
  file that does not exist is a warning, so ``mkdocs build --strict`` fails on it as on any
  broken link inside the site.
"""

from __future__ import annotations

import dataclasses
import logging
import posixpath
import re
import typing
from pathlib import Path
from typing import Any

log = logging.getLogger("mkdocs.hooks.reference")

_MARKER = re.compile(r"<!-- shardtrain:([a-z-]+) -->")
# [text](target) with a relative target (no scheme, no leading / or #).
_LINK = re.compile(r"\]\((?![a-z][a-z0-9+.-]*:|/|#)([^)\s]+)\)")


def _text(s: str) -> str:
    """A docstring's reStructuredText as Markdown in a table cell: ``x`` and :role:`~a.b.x`
    as code, one line, pipes escaped."""
    s = re.sub(r":[a-z]+:`~?([^`]+)`", r"`\1`", s)
    s = s.replace("``", "`")
    return " ".join(s.split()).replace("|", "\\|")


def _value(v: Any) -> str:
    from shardtrain.kubeflow.parameters import REQUIRED

    return "required" if v is REQUIRED else f"`{v!r}`"


def _pipeline_parameters() -> str:
    from shardtrain.kubeflow.parameters import PIPELINE

    rows = ["| parameter | type | default | description |", "| --- | --- | --- | --- |"]
    rows += [
        f"| `{p.name}` | `{p.annotation}` | {_value(p.default)} | {_text(p.help)} |"
        for p in PIPELINE
    ]
    return "\n".join(rows)


#: The components in the order the pipeline runs them: (name, its parameter list's name).
_COMPONENTS = (
    ("plan_shards", "PLAN_SHARDS"),
    ("shard", "SHARD"),
    ("settle_shards", "SETTLE_SHARDS"),
    ("finalize_shards", "FINALIZE_SHARDS"),
    ("train", "TRAIN"),
    ("evaluate", "EVALUATE"),
    ("export", "EXPORT"),
    ("deploy", "DEPLOY"),
)


def _component_parameters() -> str:
    from shardtrain.kubeflow import parameters

    out = []
    for name, attr in _COMPONENTS:
        params = getattr(parameters, attr)
        out += [
            f"### `{name}`",
            "",
            "| parameter | type | from the pipeline's | description |",
            "| --- | --- | --- | --- |",
        ]
        for p in params:
            source = f"`{p.source}`" if p.source else ("output" if p.output else "the graph")
            out.append(f"| `{p.name}` | `{p.annotation}` | {source} | {_text(p.help)} |")
        if name == "evaluate":
            b = parameters.BLESSED
            out.append(f"| `{b.name}` (returned) | `{b.annotation}` | output | {_text(b.help)} |")
        out.append("")
    return "\n".join(out)


def _attributes(cls: type) -> dict[str, str]:
    """The ``Attributes:`` entries of a Google-style class docstring, by field name; an entry
    naming several fields (``label, key: ...``) describes each."""
    doc = cls.__doc__ or ""
    if "Attributes:" not in doc:
        return {}
    entries: dict[str, str] = {}
    names: list[str] = []
    for line in doc.split("Attributes:", 1)[1].splitlines():
        m = re.match(r"^\s{8}([a-z_, ]+):\s*(.*)$", line)
        if m:
            names = [n.strip() for n in m.group(1).split(",")]
            for n in names:
                entries[n] = m.group(2)
        elif line.strip() and names:
            for n in names:
                entries[n] += " " + line.strip()
    return entries


def _type_name(hint: Any) -> str:
    """``str``, ``dict[str, SplitInfo]``, ``str | None``: a field's type as its source writes it."""
    text = hint.__name__ if isinstance(hint, type) else str(hint)
    return re.sub(r"\b(?:shardtrain|typing)\.(?:[a-z_]+\.)*", "", text)


def _describe(cls: type) -> list[str]:
    """A table of ``cls``'s fields as JSON keys: type, required or default, description (its
    docstring entry, the entry that names it in passing, or the class's summary line)."""
    import shardtrain.data.metadata as md

    attrs = _attributes(cls)
    hints = typing.get_type_hints(cls, vars(md))
    rows = ["| key | type | when absent | description |", "| --- | --- | --- | --- |"]
    for f in dataclasses.fields(cls):
        desc = attrs.get(f.name) or next((d for d in attrs.values() if f"``{f.name}``" in d), None)
        if f.name == "format" and desc is None:
            desc = f"the format tag: ``{md.FORMAT}`` (readable: {', '.join(md.READABLE_FORMATS)})"
        if desc is None:
            desc = (cls.__doc__ or "").strip().split("\n\n")[0]
            if len(dataclasses.fields(cls)) > 1 and not attrs:
                desc = f"(see {cls.__name__} above)"
        if f.default is not dataclasses.MISSING:
            absent = f"`{f.default!r}`"
        elif f.default_factory is not dataclasses.MISSING:
            absent = f"`{f.default_factory()!r}`"
        else:
            absent = "required"
        hint = _type_name(hints[f.name])
        rows.append(f"| `{f.name}` | `{hint}` | {absent} | {_text(desc)} |")
    return rows


def _metadata() -> str:
    import shardtrain.data.metadata as md

    out = []
    for cls in (md.DatasetMetadata, md.LabelInfo, md.SplitInfo, md.ShardInfo, md.DatasetStats):
        summary = _text((cls.__doc__ or "").strip().split("\n\n")[0])
        out += [f"### `{cls.__name__}`", "", summary, "", *_describe(cls), ""]
    return "\n".join(out)


_GENERATORS = {
    "pipeline-parameters": _pipeline_parameters,
    "component-parameters": _component_parameters,
    "metadata": _metadata,
}


def _generate(match: re.Match[str], page: Any) -> str:
    name = match.group(1)
    if name not in _GENERATORS:
        log.warning("%s: unknown generated table '%s'", page.file.src_uri, name)
        return match.group(0)
    return _GENERATORS[name]()


def _repo_link(match: re.Match[str], page: Any, config: Any) -> str:
    target = match.group(1)
    path, _, anchor = target.partition("#")
    docs_dir = Path(config.docs_dir)
    here = (docs_dir / page.file.src_uri).parent
    resolved = (here / path).resolve()
    try:
        resolved.relative_to(docs_dir.resolve())
        return match.group(0)  # inside the site: MkDocs checks it
    except ValueError:
        pass
    root = docs_dir.resolve().parent
    if not resolved.exists():
        log.warning("%s: link to '%s', which does not exist", page.file.src_uri, target)
        return match.group(0)
    rel = posixpath.join(*resolved.relative_to(root).parts)
    kind = "tree" if resolved.is_dir() else "blob"
    url = f"{config.repo_url.rstrip('/')}/{kind}/main/{rel}" + (f"#{anchor}" if anchor else "")
    return f"]({url})"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    markdown = _MARKER.sub(lambda m: _generate(m, page), markdown)
    return _LINK.sub(lambda m: _repo_link(m, page, config), markdown)
