"""Frozen records that are dataclasses when asked, and named tuples, defined without compiling code.

``@frozen`` gives a class what ``@dataclass(frozen=True)`` gives it (``__init__`` over the
annotated fields in order, with their defaults; ``__repr__``, ``__eq__``, ``__hash__``,
``__match_args__``; assignment raises ``dataclasses.FrozenInstanceError``) from methods shared by
every record instead of code generated and compiled per class. ``dataclasses.fields``,
``replace``, ``asdict`` and ``is_dataclass`` work on them as on a dataclass: the first look at
``__dataclass_fields__`` builds the real ``Field`` objects (imports :mod:`dataclasses` then).

``@tuple_record`` makes a class body with annotated fields (and defaults, methods, properties) the
named tuple ``typing.NamedTuple`` would make of it: a tuple subclass with ``_fields``,
``_field_defaults``, ``_make``, ``_replace``, ``_asdict`` and the same ``repr``. ``NamedTuple``
compiles every field's annotation (a string, with ``from __future__ import annotations``) and
``namedtuple`` evaluates its ``__new__``; the first compile in a process starts the parser, which
alone costs ~10 M instructions (``GpuEvent`` took 11 M).

Why: ``gpuutil analyze`` is a short process, and importing ``dataclasses`` (which imports
``inspect``, ``ast``, ``dis``, ``tokenize``) and generating 14 classes' methods took ~15 ms of
its ~150 (``-X importtime``; callgrind: ~100 M instructions of 1,628 M), its 12 named tuples ~30 M.
"""
from __future__ import annotations

from collections import deque
from itertools import repeat
from operator import attrgetter, itemgetter

try:  # what collections.namedtuple's fields are made of: a C descriptor, where CPython has it
    from _collections import _tuplegetter
except ImportError:  # pragma: no cover
    def _tuplegetter(index: int, doc: str) -> property:
        return property(itemgetter(index), doc=doc)

_MISSING = object()


class _Field:
    """What :func:`field` returns: a default or a factory, and whether the field is compared and shown."""

    __slots__ = ("default", "default_factory", "compare", "repr")

    def __init__(self, default: object, default_factory: object, compare: bool, repr: bool):
        self.default = default
        self.default_factory = default_factory
        self.compare = compare
        self.repr = repr


def field(*, default: object = _MISSING, default_factory: object = _MISSING, compare: bool = True,
          repr: bool = True) -> object:
    """A field's options, as ``dataclasses.field`` takes them (only those the records use)."""
    if default is not _MISSING and default_factory is not _MISSING:
        raise ValueError("cannot specify both default and default_factory")
    return _Field(default, default_factory, compare, repr)


def frozen(cls: type) -> type:
    """Make ``cls`` a frozen record of its annotated fields (see the module's docstring)."""
    if "__post_init__" in cls.__dict__:
        raise TypeError(f"{cls.__name__}: a frozen record has no __post_init__ (use @dataclass)")
    specs: dict[str, _Field] = {}
    for name, annotation in cls.__dict__.get("__annotations__", {}).items():
        if "ClassVar" in str(annotation):
            continue
        value = cls.__dict__.get(name, _MISSING)
        spec = value if isinstance(value, _Field) else _Field(value, _MISSING, True, True)
        if isinstance(value, _Field):
            if value.default is _MISSING:
                delattr(cls, name)
            else:
                setattr(cls, name, value.default)
        if (spec.default is _MISSING and spec.default_factory is _MISSING
                and any(s.default is not _MISSING or s.default_factory is not _MISSING for s in specs.values())):
            raise TypeError(f"non-default argument {name!r} follows default argument")
        specs[name] = spec
    names = tuple(specs)
    shown = tuple(name for name, spec in specs.items() if spec.repr)
    compared = attrgetter(*[name for name, spec in specs.items() if spec.compare] or ["__class__"])
    defaults = [(name, spec.default, spec.default_factory) for name, spec in specs.items()
                if spec.default is not _MISSING or spec.default_factory is not _MISSING]
    count = len(names)

    def __init__(self, *args, **kwargs):  # noqa: N807
        if kwargs or len(args) != count:
            args = _bind(cls, names, defaults, args, kwargs)
        self.__dict__.update(zip(names, args))

    def __repr__(self) -> str:  # noqa: N807
        return f"{type(self).__qualname__}({', '.join(f'{name}={getattr(self, name)!r}' for name in shown)})"

    def __eq__(self, other: object) -> bool:  # noqa: N807
        if other.__class__ is self.__class__:
            return compared(self) == compared(other)
        return NotImplemented

    def __hash__(self) -> int:  # noqa: N807
        return hash(compared(self))

    for method in (__init__, __repr__, __eq__):
        if method.__name__ not in cls.__dict__:
            method.__qualname__ = f"{cls.__qualname__}.{method.__name__}"
            setattr(cls, method.__name__, method)
    if cls.__dict__.get("__hash__") is None:  # absent, or None because the class defines __eq__
        __hash__.__qualname__ = f"{cls.__qualname__}.__hash__"
        cls.__hash__ = __hash__
    cls.__setattr__ = _no_setattr
    cls.__delattr__ = _no_delattr
    cls.__replace__ = replace  # copy.replace (Python 3.13), as dataclasses give it
    cls.__match_args__ = names
    cls.__record_fields__ = specs
    for lazy in ("__dataclass_fields__", "__dataclass_params__", "__signature__"):
        setattr(cls, lazy, _AsDataclass(cls, lazy))
    return cls


def tuple_record(cls: type) -> type:
    """The named tuple of ``cls``'s annotated fields, with its defaults, methods and properties (see the module)."""
    body = dict(cls.__dict__)
    names = tuple(name for name in body.get("__annotations__", {}) if name not in ("_fields", "_field_defaults"))
    defaults = {name: body.pop(name) for name in names if name in body}
    if any(name in defaults for name in names[:len(names) - len(defaults)]):
        raise TypeError(f"{cls.__name__}: a field without a default follows one with a default")
    count = len(names)
    given = [(name, defaults[name], _MISSING) for name in names if name in defaults]
    new_tuple = tuple.__new__

    def __new__(_cls, *args, **kwargs):  # noqa: N807
        if kwargs or len(args) != count:
            args = _bind(_cls, names, given, args, kwargs, "__new__")
        return new_tuple(_cls, args)

    def _make(_cls, iterable):
        made = new_tuple(_cls, iterable)
        if len(made) != count:
            raise TypeError(f"Expected {count} arguments, got {len(made)}")
        return made

    def _replace(self, **changes):
        made = self._make(map(changes.pop, names, self))
        if changes:
            raise ValueError(f"Got unexpected field names: {list(changes)!r}")
        return made

    def __repr__(self) -> str:  # noqa: N807
        return f"{self.__class__.__name__}({', '.join(f'{name}={value!r}' for name, value in zip(names, self))})"

    for name in ("__dict__", "__weakref__"):
        body.pop(name, None)
    body.update({"__slots__": (), "_fields": names, "_field_defaults": defaults, "__match_args__": names,
                 "__new__": __new__, "_make": classmethod(_make), "_replace": _replace, "__replace__": _replace,
                 "_asdict": lambda self: dict(zip(names, self)), "__getnewargs__": lambda self: tuple(self)})
    body.setdefault("__repr__", __repr__)
    for index, name in enumerate(names):
        body[name] = _tuplegetter(index, f"Alias for field number {index}")
    made = type(cls.__name__, (tuple,), body)
    for function in (__new__, _make, _replace, __repr__):
        function.__qualname__ = f"{made.__qualname__}.{function.__name__}"
    return made


def records_of(cls: type, fields: list) -> list:
    """Records of the frozen class ``cls`` made from dicts of all their fields, in the fields' order
    (a flush's thousands of records: each dict a display of the field names, written beside the class,
    and no ``__init__`` frame per record; ``cls(*values)`` makes the same record)."""
    made = list(map(object.__new__, repeat(cls, len(fields))))
    # the instances' __dict__ slot set straight (past the frozen __setattr__, and object.__setattr__'s lookup)
    slot = next(klass.__dict__["__dict__"] for klass in cls.__mro__ if "__dict__" in klass.__dict__)
    deque(map(slot.__set__, made, fields), maxlen=0)
    return made


def replace(record: object, **changes: object) -> object:
    """A copy of ``record`` with ``changes`` (``dataclasses.replace`` of a frozen record, without its import)."""
    values = record.__dict__
    return type(record)(**{name: changes.pop(name) if name in changes else values[name]
                           for name in type(record).__record_fields__}, **changes)


def _bind(cls: type, names: tuple[str, ...], defaults: list, args: tuple, kwargs: dict,
          method: str = "__init__") -> tuple:
    """The values of every field from positional and keyword arguments and the defaults, or TypeError."""
    if len(args) > len(names):
        raise TypeError(f"{cls.__name__}.{method}() takes {len(names) + 1} positional arguments "
                        f"but {len(args) + 1} were given")
    values = dict(zip(names, args))
    for name, value in kwargs.items():
        if name not in names:
            raise TypeError(f"{cls.__name__}.{method}() got an unexpected keyword argument {name!r}")
        if name in values:
            raise TypeError(f"{cls.__name__}.{method}() got multiple values for argument {name!r}")
        values[name] = value
    for name, default, factory in defaults:
        if name not in values:
            values[name] = default if factory is _MISSING else factory()
    missing = [name for name in names if name not in values]
    if missing:
        raise TypeError(f"{cls.__name__}.{method}() missing {len(missing)} required argument(s): "
                        + ", ".join(repr(name) for name in missing))
    return tuple(values[name] for name in names)


def _no_setattr(self: object, name: str, value: object) -> None:
    from dataclasses import FrozenInstanceError

    raise FrozenInstanceError(f"cannot assign to field {name!r}")


def _no_delattr(self: object, name: str) -> None:
    from dataclasses import FrozenInstanceError

    raise FrozenInstanceError(f"cannot delete field {name!r}")


class _AsDataclass:
    """The dataclass attributes of a record, built on first look by ``dataclasses`` itself from a
    twin class of the same fields (so they are what ``@dataclass(frozen=True)`` would have made)."""

    def __init__(self, cls: type, name: str):
        self.cls = cls
        self.name = name

    def __get__(self, instance: object, owner: type = None) -> object:
        import dataclasses
        import inspect

        cls = self.cls
        namespace: dict[str, object] = {"__annotations__": {name: cls.__annotations__[name] for name in cls.__record_fields__},
                                        "__module__": cls.__module__, "__qualname__": cls.__qualname__,
                                        "__doc__": cls.__doc__}
        for name, spec in cls.__record_fields__.items():
            if spec.default_factory is not _MISSING or not (spec.compare and spec.repr):
                namespace[name] = dataclasses.field(default=spec.default if spec.default is not _MISSING else dataclasses.MISSING,
                                                    default_factory=(spec.default_factory if spec.default_factory is not _MISSING
                                                                     else dataclasses.MISSING),
                                                    compare=spec.compare, repr=spec.repr)
            elif spec.default is not _MISSING:
                namespace[name] = spec.default
        twin = dataclasses.dataclass(frozen=True)(type(cls.__name__, (), namespace))
        attributes = {"__dataclass_fields__": twin.__dataclass_fields__,
                      "__dataclass_params__": twin.__dataclass_params__,
                      "__signature__": inspect.signature(twin)}
        for name, value in attributes.items():
            type.__setattr__(cls, name, value)
        return attributes[self.name]


__all__ = ["field", "frozen", "records_of", "replace", "tuple_record"]
