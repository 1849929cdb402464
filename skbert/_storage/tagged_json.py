"""Plain values as tagged JSON, the value format of skbert's saves: no files, no code.

Every value becomes ``{"type": tag, ...}``: ``none``, ``bool``, ``int``, ``float`` (NaN and
infinities as strings), ``str``, ``list``, ``tuple``, ``dict`` (keys encoded too),
``ndarray``, ``numpy_scalar``, and the frozen dataclasses that the caller names (their fields
encoded the same way). Decoding builds only these types: nothing read names a class to import
or code to run.

Used by :mod:`skbert._nn.state` (the read-out in a network's description) and extended with the
objects of a fitted estimator, some of which need files, by
:mod:`skbert._estimator.persistence.codec`.
"""

from __future__ import annotations

import base64
import dataclasses
import math
import re

import numpy as np

__all__ = ["ValueWriter", "ValueReader", "cannot_encode", "as_int"]


class ValueWriter:
    """Encodes plain values as tagged JSON.

    Parameters
    ----------
    dataclass_types : tuple of type, default=()
        The dataclasses stored field by field, under their class name as the tag.
    """

    def __init__(self, dataclass_types=()):
        self.dataclass_types = tuple(dataclass_types)

    def encode(self, value, where: str) -> dict:
        """The tagged JSON of ``value``; ``where`` names it in errors (and in file names)."""
        if value is None:
            return {"type": "none"}
        if isinstance(value, np.generic):  # before the builtins: np.float64 is a float
            return _encode_numpy_scalar(value, where)
        kind = type(value)
        if kind in (bool, int, str):
            return {"type": kind.__name__, "value": value}
        if kind is float:
            return {"type": "float", "value": value if math.isfinite(value) else repr(value)}
        if kind in (list, tuple):
            items = [self.encode(v, f"{where}[{i}]") for i, v in enumerate(value)]
            return {"type": kind.__name__, "items": items}
        if kind is dict:
            items = [
                [self.encode(k, f"{where} key {k!r}"), self.encode(v, f"{where}[{k!r}]")]
                for k, v in value.items()
            ]
            return {"type": "dict", "items": items}
        if kind is np.ndarray:
            return _encode_array(value, where)
        if kind in self.dataclass_types:
            fields = {
                f.name: self.encode(getattr(value, f.name), f"{where}.{f.name}")
                for f in dataclasses.fields(value)
            }
            return {"type": kind.__name__, "fields": fields}
        return self.encode_object(value, where)

    def encode_object(self, value, where: str) -> dict:
        """The tagged JSON of a value that is none of the plain types (here: refused)."""
        cannot_encode(value, where)


class ValueReader:
    """Decodes :class:`ValueWriter`'s tagged JSON; builds only the types it knows.

    Parameters
    ----------
    dataclass_types : tuple of type, default=()
        The dataclasses that may be built, by their class name as the tag.
    """

    def __init__(self, dataclass_types=()):
        self.dataclass_types = {cls.__name__: cls for cls in dataclass_types}

    def decode(self, node, where: str):
        """The value of the tagged JSON ``node``; ``where`` names it in errors."""
        if not isinstance(node, dict) or not isinstance(node.get("type"), str):
            raise ValueError(f"{where}: {node!r:.80} is not a tagged value")
        tag = node["type"]
        decoder = _PLAIN_DECODERS.get(tag)
        if decoder is not None:
            return decoder(self, node, where)
        if tag in self.dataclass_types:
            return _decode_dataclass(self, self.dataclass_types[tag], node, where)
        return self.decode_object(tag, node, where)

    def decode_object(self, tag: str, node, where: str):
        """The value of a tag that is none of the plain types (here: refused)."""
        raise ValueError(f"{where}: unknown value type {tag!r}")

    def items(self, node, where: str) -> list:
        items = node["items"]
        if not isinstance(items, list):
            raise ValueError(f"{where}: items is not a list")
        return [self.decode(v, f"{where}[{i}]") for i, v in enumerate(items)]


def cannot_encode(value, where: str):
    """Raise the ``TypeError`` of a value that skbert's save format does not store."""
    raise TypeError(
        f"cannot save {where}: a {type(value).__module__}.{type(value).__qualname__}, which "
        "skbert's save format does not store (None, bool, int, float, str, list, tuple, dict, "
        "numpy arrays and scalars, and the objects of a fitted skbert estimator). Delete the "
        "attribute, or pickle the estimator instead."
    )


def as_int(value) -> int:
    """``value`` if it is a JSON int (not a bool), else a ``ValueError``."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{value!r} is not an int")
    return value


def _decode_float(reader, node, where):
    value = node["value"]
    if isinstance(value, str) and value in ("nan", "inf", "-inf"):
        return float(value)
    if type(value) not in (int, float):
        raise ValueError(f"{where}: {value!r} is not a float")
    return float(value)


def _decode_builtin(kind):
    def decode(reader, node, where):
        value = node["value"]
        if type(value) is not kind:
            raise ValueError(f"{where}: {value!r:.80} is not a {kind.__name__}")
        return value

    return decode


def _decode_dict(reader, node, where):
    pairs = node["items"]
    if not isinstance(pairs, list) or not all(isinstance(p, list) and len(p) == 2 for p in pairs):
        raise ValueError(f"{where}: items is not a list of [key, value] pairs")
    result = {}
    for i, (key, value) in enumerate(pairs):
        key = reader.decode(key, f"{where} key {i}")
        try:
            result[key] = reader.decode(value, f"{where}[{key!r}]")
        except TypeError as exc:  # an unhashable key
            raise ValueError(f"{where}: key {i} is not hashable ({exc})") from exc
    return result


def _decode_dataclass(reader, cls, node, where):
    fields = node["fields"]
    names = {f.name for f in dataclasses.fields(cls)}
    if not isinstance(fields, dict) or set(fields) != names:
        raise ValueError(f"{where}: the fields of a {cls.__name__} are {sorted(names)}")
    return cls(**{k: reader.decode(v, f"{where}.{k}") for k, v in fields.items()})


_PLAIN_DECODERS = {
    "none": lambda reader, node, where: None,
    "bool": _decode_builtin(bool),
    "int": _decode_builtin(int),
    "str": _decode_builtin(str),
    "float": _decode_float,
    "list": lambda reader, node, where: reader.items(node, where),
    "tuple": lambda reader, node, where: tuple(reader.items(node, where)),
    "dict": _decode_dict,
    "ndarray": lambda reader, node, where: _decode_array(node, where),
    "numpy_scalar": lambda reader, node, where: _decode_numpy_scalar(node, where),
}


# ---------------------------------------------------------------------- numpy values
#: array kinds stored as raw bytes: bool, signed and unsigned ints, floats, complex
_RAW_KINDS = "biufc"


def _encode_array(array: np.ndarray, where: str) -> dict:
    head = {"type": "ndarray", "dtype": array.dtype.str, "shape": list(array.shape)}
    kind = array.dtype.kind
    if kind in _RAW_KINDS:
        data = base64.b64encode(np.ascontiguousarray(array).tobytes()).decode("ascii")
        return {**head, "data": data}
    if kind == "U":
        return {**head, "items": [str(v) for v in array.ravel().tolist()]}
    if kind == "O":
        items = []
        for i, value in enumerate(array.ravel().tolist()):
            if not isinstance(value, (str, int, float, bool, np.generic)):
                raise TypeError(
                    f"cannot save {where}: item {i} of this object array is a "
                    f"{type(value).__name__}; object arrays are stored when their items are "
                    "str, int, float or bool (labels)."
                )
            items.append(ValueWriter().encode(value, f"{where}[{i}]"))
        return {**head, "items": items}
    raise TypeError(
        f"cannot save {where}: an array of dtype {array.dtype}; arrays of bool, numbers, "
        "str and object labels are stored."
    )


def _decode_array(node, where: str) -> np.ndarray:
    dtype = _dtype(node["dtype"], "biufcUO", where)
    shape = node["shape"]
    if not isinstance(shape, list) or not all(type(n) is int and n >= 0 for n in shape):
        raise ValueError(f"{where}: shape {shape!r} is not a list of sizes")
    size = math.prod(shape)
    if dtype.kind in _RAW_KINDS:
        data = _b64(node["data"], where)
        if len(data) != size * dtype.itemsize:
            raise ValueError(f"{where}: {len(data)} bytes for {size} items of {dtype}")
        return np.frombuffer(data, dtype=dtype).reshape(shape).copy()
    items = node["items"]
    if not isinstance(items, list) or len(items) != size:
        raise ValueError(f"{where}: {size} items expected")
    if dtype.kind == "U":
        if not all(isinstance(v, str) for v in items):
            raise ValueError(f"{where}: a str array holds a non-str")
        return np.array(items, dtype=dtype).reshape(shape)
    reader = ValueReader()
    values = [reader.decode(v, f"{where}[{i}]") for i, v in enumerate(items)]
    if not all(isinstance(v, (str, int, float, bool, np.generic)) for v in values):
        raise ValueError(f"{where}: an object array holds more than labels")
    array = np.empty(size, dtype=object)
    array[:] = values
    return array.reshape(shape)


def _encode_numpy_scalar(value: np.generic, where: str) -> dict:
    kind = value.dtype.kind
    if kind in _RAW_KINDS:
        data = base64.b64encode(value.tobytes()).decode("ascii")
        return {"type": "numpy_scalar", "dtype": value.dtype.str, "data": data}
    if kind == "U":
        return {"type": "numpy_scalar", "dtype": value.dtype.str, "value": str(value)}
    raise TypeError(
        f"cannot save {where}: a numpy {value.dtype} scalar; numpy bool, number and str "
        "scalars are stored."
    )


def _decode_numpy_scalar(node, where: str):
    dtype = _dtype(node["dtype"], _RAW_KINDS + "U", where)
    if dtype.kind == "U":
        value = node["value"]
        if not isinstance(value, str):
            raise ValueError(f"{where}: {value!r:.80} is not a str")
        return np.str_(value)
    data = _b64(node["data"], where)
    if len(data) != dtype.itemsize:
        raise ValueError(f"{where}: {len(data)} bytes for one {dtype}")
    return np.frombuffer(data, dtype=dtype)[0]


def _dtype(text, kinds: str, where: str) -> np.dtype:
    """The numpy dtype ``text`` (as ``dtype.str`` writes it), if of one of ``kinds``."""
    if not isinstance(text, str) or not re.fullmatch(r"[<>|=][biufcUO]\d{0,4}", text):
        raise ValueError(f"{where}: dtype {text!r:.40} is not a stored dtype")
    dtype = np.dtype(text)
    if dtype.kind not in kinds:
        raise ValueError(f"{where}: dtype {text!r} is not allowed here")
    return dtype


def _b64(text, where: str) -> bytes:
    if not isinstance(text, str):
        raise ValueError(f"{where}: data is not base64 text")
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError) as exc:
        raise ValueError(f"{where}: data is not base64 ({exc})") from exc
