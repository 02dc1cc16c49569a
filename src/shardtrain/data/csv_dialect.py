"""How a CSV file is written: delimiter, quoting, escapes, encoding, header, null words, decimals.

:class:`CsvDialect` is the one description of the text format every CSV reader of the sharder
uses (the schema inference, the planning of byte ranges, the block parser). It is stored in
the plan (``options["csv_dialect"]``), so every task of a run reads the files the same way.

Defaults follow RFC 4180 and pandas' ``read_csv``: ``,`` between fields, ``"`` around fields
that hold delimiters, quotes or line breaks (a quote inside is doubled), no escape character,
UTF-8 text, a header line, and the null words of
:data:`~shardtrain.data.schema.DEFAULT_NULL_VALUES`.

The delimiter, when not given, is detected from the sample: the first of ``, ; \\t |`` that
splits the header and the first lines into the same number (> 1) of fields, the one giving
the most fields winning (see :func:`detect_delimiter`).

Numbers may be written with a decimal comma (``--decimal ,``: ``1,5``, ``-0,25``,
``1,5e3``), as European Excel and pandas' ``to_csv(decimal=",")`` write them, with ``;``
between fields. Then ``1.5`` is not a number (it stays text, as in pandas), and ``,`` is
never taken for the delimiter.
"""

from __future__ import annotations

import codecs
import csv
import functools
import io
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import IO, Any

from shardtrain.errors import ConfigError

#: Delimiters tried, in order of preference, when ``--delimiter`` is not given.
CANDIDATE_DELIMITERS = (",", ";", "\t", "|")

#: The decimal marks a number may be written with (``--decimal``).
DECIMAL_MARKS = (".", ",")

_NAMES = {
    "\\t": "\t",
    "tab": "\t",
    "TAB": "\t",
    "comma": ",",
    "semicolon": ";",
    "pipe": "|",
    "dot": ".",
    "point": ".",
}


def _one_byte(value: str | None, what: str, *, allow_none: bool) -> str | None:
    if value is None or value == "":
        if allow_none:
            return None
        raise ConfigError(f"{what} cannot be empty")
    value = _NAMES.get(value, value)
    if len(value) != 1 or not value.isascii() or value in "\r\n":
        raise ConfigError(f"{what} must be one ASCII character (got {value!r})")
    return value


@dataclass(frozen=True)
class CsvDialect:
    """The text format of the CSV sources of one run.

    Attributes:
        delimiter: the field separator (one ASCII character); None until detected.
        quote_char: the quote character; None reads quotes as ordinary text (and lets the
            planner cut large files without reading them first).
        escape_char: a character that makes the next one literal (``\\``); None: quotes
            inside quoted fields are doubled, as RFC 4180 says.
        encoding: the files' text encoding (any Python codec name: ``utf-8``, ``cp932``,
            ``shift_jis``, ``latin-1``, ``cp1252``, ``utf-16``...). Files in an encoding other
            than UTF-8 are transcoded to UTF-8 while they are read, each by one task.
        header: the first line of every file names the columns.
        columns: the column names of files without a header (``--columns``).
        null_values: field values read as missing (quoted or not, as in pandas); None: the
            defaults, or the schema file's ``null_values``.
        skip_initial_space: ignore spaces right after a delimiter (``1, 3, a``).
        decimal: the decimal mark of numbers: ``.`` or ``,`` (``1,5``: European Excel,
            pandas' ``to_csv(decimal=",")``, R's ``write.csv2``). With ``,`` a float is
            ``1,5``/``-0,25``/``1,5e3`` and ``1.5`` is text; the delimiter cannot be ``,``
            (when not given it is detected among the others, ``;`` when none fits). Floats
            are correctly rounded to float32 either way. No thousands separator is read:
            ``1.234,5`` is text.
    """

    delimiter: str | None = None
    quote_char: str | None = '"'
    escape_char: str | None = None
    encoding: str = "utf-8"
    header: bool = True
    columns: tuple[str, ...] | None = None
    null_values: tuple[str, ...] | None = None
    skip_initial_space: bool = False
    decimal: str = "."

    def __post_init__(self) -> None:
        if self.delimiter is not None:
            object.__setattr__(
                self, "delimiter", _one_byte(self.delimiter, "--delimiter", allow_none=False)
            )
        object.__setattr__(
            self, "quote_char", _one_byte(self.quote_char, "--quote-char", allow_none=True)
        )
        object.__setattr__(
            self, "escape_char", _one_byte(self.escape_char, "--escape-char", allow_none=True)
        )
        chars = [c for c in (self.delimiter, self.quote_char, self.escape_char) if c]
        if len(set(chars)) != len(chars):
            raise ConfigError("--delimiter, --quote-char and --escape-char must differ")
        decimal = _NAMES.get(self.decimal, self.decimal)
        if decimal not in DECIMAL_MARKS:
            raise ConfigError(f"--decimal must be '.' or ',' (got {self.decimal!r})")
        object.__setattr__(self, "decimal", decimal)
        for char, flag in (
            (self.delimiter, "--delimiter"),
            (self.quote_char, "--quote-char"),
            (self.escape_char, "--escape-char"),
        ):
            if char == decimal:
                hint = " (decimal-comma files separate fields with ';')" if decimal == "," else ""
                raise ConfigError(
                    f"--decimal {decimal!r} cannot also be the {flag}: a number like "
                    f"1{decimal}5 would split in two{hint}"
                )
        try:
            name = codecs.lookup(self.encoding).name
        except LookupError as exc:
            raise ConfigError(f"--encoding: unknown encoding {self.encoding!r}") from exc
        object.__setattr__(self, "encoding", name)
        if self.header and self.columns:
            raise ConfigError("--columns goes with --no-header (files with a header name theirs)")
        if self.columns is not None:
            object.__setattr__(self, "columns", tuple(self.columns))

    @property
    def utf8(self) -> bool:
        """Whether the files are read as they are (UTF-8, of which ASCII is a part)."""
        return self.encoding in ("utf-8", "ascii")

    @property
    def cuttable(self) -> bool:
        """Whether a file can be cut into byte ranges read by separate tasks.

        True when every line feed, carriage return, delimiter, quote and escape byte of the
        file *is* that character, never a byte inside a multi-byte character: then a record
        start found in the raw bytes (:mod:`shardtrain.data.sources.csv.align`) is a
        record start of the text, and each range is transcoded on its own. So UTF-8; every
        single-byte encoding that keeps ASCII (latin-1, cp1252, the ISO 8859 family...); and
        the East Asian multi-byte encodings whose following bytes are never below
        :data:`MULTIBYTE_TRAIL_MIN`'s bound (Shift_JIS/cp932, EUC, GBK, Big5...) as long as
        the dialect's characters are below it — a ``|`` delimiter or a ``\\`` escape in
        Shift_JIS is not (``0x7C`` and ``0x5C`` are second bytes of kanji), nor is UTF-16.
        """
        if self.utf8:
            return True
        specials = [b"\n"[0], b"\r"[0], self.delim_byte, self.quote_byte, self.escape_byte]
        bound = MULTIBYTE_TRAIL_MIN.get(self.encoding)
        if bound is None:
            return _single_byte_ascii(self.encoding)
        return all(b < bound for b in specials)

    @property
    def delim_byte(self) -> int:
        return ord(self.delimiter or ",")

    @property
    def quote_byte(self) -> int:
        """The quote as a byte, or -1 (never matches) without quoting."""
        return ord(self.quote_char) if self.quote_char else -1

    @property
    def escape_byte(self) -> int:
        return ord(self.escape_char) if self.escape_char else -1

    @property
    def special_bytes(self) -> bytes:
        """Bytes whose presence makes a block need the quote-aware reader."""
        return b"".join(c.encode() for c in (self.quote_char, self.escape_char) if c)

    @property
    def candidate_delimiters(self) -> tuple[str, ...]:
        """The delimiters detection may pick: never the decimal mark."""
        return tuple(c for c in CANDIDATE_DELIMITERS if c != self.decimal)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["columns"] = list(self.columns) if self.columns is not None else None
        d["null_values"] = list(self.null_values) if self.null_values is not None else None
        if self.decimal == ".":
            # Only when not the default: plans made before the option keep their fingerprint.
            del d["decimal"]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CsvDialect:
        d = dict(d)
        for k in ("columns", "null_values"):
            if d.get(k) is not None:
                d[k] = tuple(d[k])
        return cls(**d)

    def python_reader(self, text: str) -> Iterator[list[str]]:
        """Python's csv module reading ``text`` in this dialect (the reference slow path)."""
        return csv.reader(
            io.StringIO(text, newline=""),
            delimiter=self.delimiter or ",",
            quotechar=self.quote_char or '"',
            quoting=csv.QUOTE_MINIMAL if self.quote_char else csv.QUOTE_NONE,
            escapechar=self.escape_char,
            doublequote=True,
            skipinitialspace=self.skip_initial_space,
            strict=False,
        )


def detect_delimiter(sample: str, candidates: tuple[str, ...] = CANDIDATE_DELIMITERS) -> str | None:
    """The delimiter of a sample of text (header first), or None if none of the candidates fits.

    A candidate fits when the header and every complete line among the first 50 split into
    the same number of fields (quotes respected), more than one. Of those that fit, the one
    with the most fields wins; ties go to the earlier of ``candidates`` (``, ; \\t |``; a
    decimal-comma dialect leaves out ``,``: :attr:`CsvDialect.candidate_delimiters`).
    """
    lines = sample.splitlines(keepends=True)[:51]
    if len(lines) > 1 and not sample.endswith(("\n", "\r")):
        lines = lines[:-1]  # a line cut by the sample's end
    text = "".join(lines)
    best, best_count = None, 1
    for cand in candidates:
        try:
            rows = list(csv.reader(io.StringIO(text, newline=""), delimiter=cand, strict=False))
        except csv.Error:
            continue
        rows = [r for r in rows if r]
        if not rows:
            continue
        counts = {len(r) for r in rows}
        if len(counts) == 1 and (n := counts.pop()) > best_count:
            best, best_count = cand, n
    return best


#: Multi-byte encodings whose bytes after the first of a character are never below this value
#: (Python codec names): ASCII bytes under it in a file are always those ASCII characters.
MULTIBYTE_TRAIL_MIN = {
    "shift_jis": 0x40,
    "cp932": 0x40,
    "shift_jis_2004": 0x40,
    "shift_jisx0213": 0x40,
    "euc_jp": 0xA1,
    "euc_jis_2004": 0xA1,
    "euc_jisx0213": 0xA1,
    "euc_kr": 0xA1,
    "gb2312": 0xA1,
    "gbk": 0x40,
    "gb18030": 0x30,  # its four-byte characters hold the digits 0x30-0x39
    "big5": 0x40,
    "big5hkscs": 0x40,
    "cp950": 0x40,
    "cp949": 0x41,
}


@functools.cache
def _single_byte_ascii(encoding: str) -> bool:
    """Whether ``encoding`` maps each byte to one character and bytes 0-127 to ASCII."""
    try:
        decoder = codecs.getincrementaldecoder(encoding)("replace")
        for b in range(256):
            text = decoder.decode(bytes([b]))
            if len(text) != 1 or (b < 128 and text != chr(b)):
                return False
    except (LookupError, UnicodeError, ValueError):
        return False
    return True


class Utf8Transcoder(io.RawIOBase):
    """A binary stream of UTF-8 read from a binary stream in another encoding.

    Decodes incrementally (a multi-byte character split between reads is kept for the next),
    so a file of any size is transcoded in bounded memory. A byte sequence that is not valid
    in the encoding raises :class:`UnicodeDecodeError` with the offset in the source.
    """

    def __init__(self, raw: IO[bytes], encoding: str, chunk: int = 1 << 20, offset: int = 0):
        self._raw = raw
        self._decoder = codecs.getincrementaldecoder(encoding)("strict")
        self._pending = b""
        self._chunk = chunk
        self._eof = False
        #: Where ``raw`` starts in its file (error messages give file offsets).
        self._start = offset
        self.source_offset = offset

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while not self._pending and not self._eof:
            raw = self._raw.read(self._chunk)
            self._eof = not raw
            try:
                text = self._decoder.decode(raw, final=self._eof)
            except UnicodeDecodeError as exc:
                raise UnicodeDecodeError(
                    exc.encoding,
                    exc.object,
                    exc.start,
                    exc.end,
                    f"{exc.reason} at byte {self.source_offset + exc.start}",
                ) from None
            self.source_offset += len(raw)
            if text.startswith("\ufeff") and self.source_offset == len(raw) and not self._start:
                text = text[1:]  # a byte-order mark is not data
            self._pending = text.encode("utf-8")
        n = min(len(b), len(self._pending))
        b[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n


__all__ = [
    "CANDIDATE_DELIMITERS",
    "DECIMAL_MARKS",
    "CsvDialect",
    "Utf8Transcoder",
    "detect_delimiter",
]
