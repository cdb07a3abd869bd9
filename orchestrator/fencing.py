"""The generation fence: the rules that decide whether a deploy generation may still act.

A generation below the catalog's generation, or below the promotion target, is fenced: it may
not start, lead, promote itself or keep serving (exit 3). Starting, promoting, taking over,
waiting for a promotion and the sidecar's re-evaluation all ask :func:`generation_fence`, so
the decision and its wording are the same wherever it is made.

A generation stands for one release: the takeover that moves the catalog to a generation binds
it to the taker's release (``CatalogState.generation_release``). A process of another release
at that generation may neither lead nor wait to (exit 2, :func:`release_fence`): restarted
next to it, a mistaken process would otherwise take over and upgrade the catalog that nobody
promoted. The start, the re-evaluation and the takeover's own transaction ask it.
"""

from __future__ import annotations

from catalog.environment import CatalogState
from catalog.errors import FencedError, GenerationTakenError

__all__ = ["generation_fence", "release_fence"]


def release_fence(
    generation: int, release: str, catalog: CatalogState | None, *, promoted: int | None = None
) -> GenerationTakenError | None:
    """The refusal of a process of ``release`` at ``generation`` when the catalog's generation
    is ``generation`` and runs another release, or None when it may go on.

    The fix it names is a new generation, above the catalog's and the promotion target.
    """
    if catalog is None or catalog.deploy_generation != generation:
        return None
    bound = catalog.release_of_generation
    if bound == release:
        return None
    fresh = max(generation, promoted or 0) + 1
    return GenerationTakenError(
        f"deploy generation {generation} runs release {bound}, not {release}: a generation "
        f"stands for one release; start {release} at a new generation "
        f"(--deploy-generation {fresh}) and promote it",
        deploy_generation=generation,
        generation_release=bound,
        version=release,
        suggestion=f"--deploy-generation {fresh}",
    )


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
