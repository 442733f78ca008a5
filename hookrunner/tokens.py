"""The credential table moved to `common/tokens.py` (both halves use it); kept for importers."""

from sandbox_egress.common.tokens import TOKEN_FORMATS, TokenFormat, token_format

__all__ = ["TOKEN_FORMATS", "TokenFormat", "token_format"]
