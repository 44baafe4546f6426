"""T-SQL tokenizer: bracket/quoted identifiers, N'' strings, 0x literals, @vars, comments."""
import re
from dataclasses import dataclass

from ..errors import SqlError


@dataclass
class Tok:
    kind: str        # word qid str nstr int num float hex var sysvar op eof
    value: object    # unescaped identifier/string, int, bytes, operator text
    pos: int         # offset in the batch text
    end: int

    @property
    def upper(self):
        return self.value.upper() if self.kind == "word" else None

    def text(self, src):
        """The token as written (for 'Incorrect syntax near ...')."""
        return src[self.pos:self.end]


_OPS = ("<>", "!=", "<=", ">=", "!<", "!>", "::", "+=", "-=", "(", ")", ",", ".", ";", "=", "<", ">",
        "+", "-", "*", "/", "%", "&", "|", "^", "~")
_NUM = re.compile(r"(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?")
_WORD = re.compile(r"[A-Za-z_#\u0080-\uffff][A-Za-z0-9_#$@\u0080-\uffff]*")
_VAR = re.compile(r"@@?[A-Za-z0-9_#$@\u0080-\uffff]*")
_HEX = re.compile(r"0[xX]([0-9A-Fa-f]*)")


def unclosed(text):
    return SqlError(105, "Unclosed quotation mark after the character string '%s'." % text, 15, 1,
                    batch_abort=True)


def tokenize(src):
    """Source text -> list of Tok ending with an 'eof' token."""
    toks, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if c.isspace():
            i += 1
            continue
        if src.startswith("--", i):
            j = src.find("\n", i)
            i = n if j < 0 else j + 1
            continue
        if src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            if depth:
                raise SqlError(113, "Missing end comment mark '*/'.", 15, 1, batch_abort=True)
            i = j
            continue
        start = i
        if c in "Nn" and i + 1 < n and src[i + 1] == "'":
            s, i = _quoted(src, i + 1, "'", "'")
            toks.append(Tok("nstr", s, start, i))
            continue
        if c == "'":
            s, i = _quoted(src, i, "'", "'")
            toks.append(Tok("str", s, start, i))
            continue
        if c == "[":
            s, i = _quoted(src, i, "[", "]")
            toks.append(Tok("qid", s, start, i))
            continue
        if c == '"':
            s, i = _quoted(src, i, '"', '"')
            toks.append(Tok("qid", s, start, i))
            continue
        m = _HEX.match(src, i)
        if m and not (m.end() < n and (src[m.end()].isalnum() or src[m.end()] == "_")):
            digits = m.group(1)
            if len(digits) % 2:
                digits = "0" + digits
            toks.append(Tok("hex", bytes.fromhex(digits), start, m.end()))
            i = m.end()
            continue
        if c.isdigit() or (c == "." and i + 1 < n and src[i + 1].isdigit()):
            m = _NUM.match(src, i)
            text = m.group(0)
            if m.group(2):
                toks.append(Tok("float", float(text), start, m.end()))
            elif "." in text:
                toks.append(Tok("num", text, start, m.end()))
            else:
                toks.append(Tok("int", int(text), start, m.end()))
            i = m.end()
            continue
        if c == "@":
            m = _VAR.match(src, i)
            text = m.group(0)
            if text.startswith("@@"):
                toks.append(Tok("sysvar", text[2:], start, m.end()))
            else:
                toks.append(Tok("var", text[1:], start, m.end()))
            i = m.end()
            continue
        m = _WORD.match(src, i)
        if m:
            toks.append(Tok("word", m.group(0), start, m.end()))
            i = m.end()
            continue
        for op in _OPS:
            if src.startswith(op, i):
                toks.append(Tok("op", op, start, i + len(op)))
                i += len(op)
                break
        else:
            raise SqlError(102, "Incorrect syntax near '%s'." % c, 15, 1, batch_abort=True)
    toks.append(Tok("eof", "", n, n))
    return toks


def _quoted(src, i, open_ch, close_ch):
    """Read a quoted string/identifier starting at ``src[i] == open_ch``; doubled close = literal."""
    j, out = i + 1, []
    n = len(src)
    while True:
        k = src.find(close_ch, j)
        if k < 0:
            if open_ch == "'":
                raise unclosed(src[i + 1:])
            raise SqlError(105, "Unclosed quotation mark after the character string '%s'." % src[i + 1:],
                           15, 1, batch_abort=True)
        out.append(src[j:k])
        if k + 1 < n and src[k + 1] == close_ch:
            out.append(close_ch)
            j = k + 2
            continue
        return "".join(out), k + 1
