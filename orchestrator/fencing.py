"""The generation fence: the one rule that decides whether a deploy generation may still act.

A generation below the catalog's generation, or below the promotion target, is fenced: it may
not start, lead, promote itself or keep serving (exit 3). Starting, promoting, taking over,
waiting for a promotion and the sidecar's re-evaluation all ask :func:`generation_fence`, so
the decision and its wording are the same wherever it is made.
"""

from __future__ import annotations

from catalog.errors import FencedError

__all__ = ["generation_fence"]


def generation_fence(
    generation: int,
    *,
    catalog: int | None = None,
    promoted: int | None = None,
    acting: str = "",
) -> FencedError | None:
    """The FencedError for ``generation`` given the catalog's generation and the promotion
    target (None when either is unknown or absent), or None when it may act.

    ``acting`` says what was attempted ("cannot promote generation 2"), to open the message.
    """
    opening = f"{acting}: " if acting else ""
    if catalog is not None and generation < catalog:
        return FencedError(
            f"{opening}deploy generation {generation} is fenced: the catalog is at generation "
            f"{catalog}",
            deploy_generation=generation,
            catalog_generation=catalog,
            suggestion=f"use generation {catalog} or higher",
        )
    if promoted is not None and generation < promoted:
        return FencedError(
            f"{opening}deploy generation {generation} is fenced: generation {promoted} is promoted",
            deploy_generation=generation,
            promotion_target=promoted,
            catalog_generation=catalog,
            suggestion=f"use generation {promoted} or higher",
        )
    return None
