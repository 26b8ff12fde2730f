"""Byte-level tokenizer of the reference server: self-contained, no downloads.

Ids 0-255 are bytes, 256 is BOS, 257 is EOS, and any id above that (when the vocab is
bigger) decodes to a deterministic printable "word" such as `` kato``. ``encode`` only
produces byte tokens, so text made of printable ASCII round-trips exactly. Every token
decodes on its own (no context), so the concatenation of streamed pieces is the text.
"""

from __future__ import annotations

from orchestrator.refserver.presets import BOS_ID, EOS_ID, NUM_BYTE_TOKENS

_CONSONANTS = "bdfghjklmnprstvz"
_VOWELS = "aeiou"
_SYLLABLES = [c + v for c in _CONSONANTS for v in _VOWELS]  # 80


def _byte_piece(b: int) -> str:
    if 32 <= b < 127 or b in (9, 10, 13):
        return chr(b)
    return f"<0x{b:02X}>"


def _word_piece(token_id: int) -> str:
    n = token_id - (EOS_ID + 1)
    parts = []
    while True:
        n, r = divmod(n, len(_SYLLABLES))
        parts.append(_SYLLABLES[r])
        if n == 0:
            break
        n -= 1
    return " " + "".join(parts)


class ByteTokenizer:
    """Bytes + BOS/EOS + printable word ids; ``vocab`` is the model's vocab size."""

    bos_id = BOS_ID
    eos_id = EOS_ID

    def __init__(self, vocab: int):
        if vocab <= EOS_ID:
            raise ValueError(f"vocab must be > {EOS_ID}, got {vocab}")
        self.vocab = vocab
        self._pieces: dict[int, str] = {}

    def encode(self, text: str, add_bos: bool = True) -> list[int]:
        ids = list(text.encode("utf-8"))
        return [BOS_ID, *ids] if add_bos else ids

    def piece(self, token_id: int) -> str:
        """The text one token contributes ("" for BOS/EOS)."""
        cached = self._pieces.get(token_id)
        if cached is not None:
            return cached
        if not 0 <= token_id < self.vocab:
            raise ValueError(f"token id {token_id} outside vocab 0..{self.vocab - 1}")
        if token_id < NUM_BYTE_TOKENS:
            text = _byte_piece(token_id)
        elif token_id in (BOS_ID, EOS_ID):
            text = ""
        else:
            text = _word_piece(token_id)
        self._pieces[token_id] = text
        return text

    def decode(self, ids: list[int]) -> str:
        return "".join(self.piece(i) for i in ids)
