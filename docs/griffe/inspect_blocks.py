"""A griffe extension for the API reference (mkdocs.yml): classes whose docstring is
built at import (`__doc__ = ... + _BLOCK_DOC_ARGS + ...`, which reading the source
cannot evaluate) are read by importing them; a constructor that passes `*args` /
`**kwargs` on to its base shows the base's parameters, with their defaults."""

import importlib
import inspect

import griffe


def _merged_parameters(cls):
    """The constructor's own named parameters, then its bases' in place of *args/**kwargs."""
    own = list(inspect.signature(cls.__init__).parameters.values())[1:]
    variadic = [p for p in own if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    named = [p for p in own if p not in variadic]
    if not variadic:
        return named
    base = _merged_parameters(cls.__mro__[1]) if cls.__mro__[1] is not object else []
    names = {p.name for p in named}
    return named + [p for p in base if p.name not in names]


class InspectClasses(griffe.Extension):
    def __init__(self, paths):
        self.paths = set(paths)

    def on_class_members(self, *, node, cls, agent, **kwargs):
        if cls.path not in self.paths:
            return
        module, name = cls.path.rsplit(".", 1)
        live = getattr(importlib.import_module(module), name)
        # Parsed as mkdocs.yml's handler parses the others (google, the same warnings off).
        cls.docstring = griffe.Docstring(
            inspect.cleandoc(live.__doc__), parent=cls, parser="google",
            parser_options={"warn_unknown_params": False, "warn_missing_types": False})
        parameters = [griffe.Parameter("self", kind=griffe.ParameterKind.positional_or_keyword)]
        for p in _merged_parameters(live):
            kind = griffe.ParameterKind.keyword_only if p.kind == p.KEYWORD_ONLY else (
                griffe.ParameterKind.positional_or_keyword)
            default = None if p.default is p.empty else repr(p.default)
            parameters.append(griffe.Parameter(p.name, kind=kind, default=default))
        init = griffe.Function("__init__", parameters=griffe.Parameters(*parameters))
        cls.set_member("__init__", init)
