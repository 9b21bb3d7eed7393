"""A Griffe extension (mkdocs.yml's mkdocstrings options): the docstrings' Sphinx roles (``:meth:`finish` ``,
``:class:`~fl_bench.contracts.StepPolicy` ``) as mkdocstrings renders references. mkdocstrings' ``sphinx``
docstring style parses the field lists (``:param x:``) but leaves inline roles as text, so the API pages showed
``:meth:`` before every name. The docstrings stay as Sphinx writes them (the code reads them with ``help()``);
the rewrite happens only on the site's copy, at load time.

A role whose target resolves to an object that the API pages show (public, documented) becomes a
cross-reference (``[`finish`][fl_bench.engine.trips.Trips.finish]``); any other becomes a code span, so
``mkdocs build --strict`` never meets a reference it cannot resolve.
"""

from __future__ import annotations

import re

import griffe

# :role:`target`, :role:`~target` (show the last part), :py:role:`target`; the role names Sphinx's Python domain has
ROLE = re.compile(r":(?:py:)?(?:meth|func|class|mod|attr|data|obj|exc|const):`(~?)([^`<>]+)`")


def _shown(obj: griffe.Object) -> bool:
    """Whether the API pages render ``obj`` with an anchor of its own (mkdocstrings' default filters:
    public names, documented objects)."""
    while obj is not None:
        if obj.name.startswith("_") and not obj.name.startswith("__"):
            return False
        if not obj.is_module and not obj.docstring:
            return False
        obj = obj.parent
    return True


def _resolve(target: str, scope: griffe.Object, collection) -> str | None:
    """The path of the object ``target`` names from ``scope`` (its members, its parents' members, the
    module's imports, or a full path), where the API pages show it; None otherwise."""
    paths, here = [], scope
    while here is not None:
        paths.append(f"{here.path}.{target}")
        here = here.parent
    paths.append(target)
    for path in paths:
        try:
            found = collection[path]
            if found.is_alias:
                found = found.final_target
        except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError, ValueError):
            continue
        return found.path if _shown(found) else None
    return None


class SphinxRoles(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs) -> None:
        self._rewrite(pkg, loader.modules_collection)

    def _rewrite(self, obj: griffe.Object, collection) -> None:
        if obj.docstring is not None:
            scope = obj if obj.is_module or obj.is_class else obj.parent

            def reference(found: re.Match) -> str:
                tilde, target = found.groups()
                target = target.lstrip(".").removesuffix("()")
                shown = target.rsplit(".", 1)[-1] if tilde else target
                path = _resolve(target, scope, collection)
                return f"[`{shown}`][{path}]" if path else f"`{shown}`"

            obj.docstring.value = ROLE.sub(reference, obj.docstring.value)
        for member in obj.members.values():
            if not member.is_alias:
                self._rewrite(member, collection)
