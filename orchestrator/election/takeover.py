"""The takeover: ONE transaction that bumps the epoch and the catalog's generation, conditioned
on the promotion target and the candidate's own node."""

from __future__ import annotations

import contextlib
import os
import socket
import time

import attrs
import structlog

from catalog.consensus import (
    Check,
    Create,
    Fence,
    Op,
    SetData,
    encode_json,
)
from catalog.environment import (
    CATALOG_KEY,
    EPOCH_KEY,
    PROMOTION_KEY,
    CatalogState,
    catalog_write_op,
)
from catalog.errors import (
    ConnectionLostError,
    FencedError,
)
from catalog.retry import CasRetry
from orchestrator.election.core import Candidacy, candidate_seq, session_hex
from orchestrator.election.values import (
    EpochInfo,
    Leadership,
    Promotion,
    candidate_key,
    promotion_of,
)
from orchestrator.events import record_event
from orchestrator.fencing import generation_fence, release_fence

log = structlog.get_logger(__name__)


class Takeover:
    """Becomes leader when this candidate is the lowest of the promotion target's generation."""

    def __init__(self, candidacy: Candidacy) -> None:
        self._candidacy = candidacy

    def try_take_over(self, *, bootstrap: bool) -> Leadership | None:
        """Become leader if this process is the lowest candidate of the promotion target.

        Returns the Leadership (the same one when already leading), or None when another
        candidate is first, our generation is not promoted, or the session is suspended. With
        ``bootstrap`` (the environment is empty), an absent promotion target is first set to our
        generation. Raises FencedError when a newer generation is promoted or in the catalog,
        GenerationTakenError when our generation runs another release.
        """
        c = self._candidacy
        with c.lock:
            if c.leadership is not None:
                return c.leadership
            if c.candidate is None or c.stopped or c.paused:
                return None
            leadership = CasRetry(max_attempts=20, deadline=10.0)(
                lambda: self._take_over_attempt(bootstrap)
            )
            if leadership is None:
                return None
            c.leadership = leadership
            c.ended_reason = None
        c.log.info("took_over", epoch=leadership.epoch, fence_version=leadership.fence.version)
        # The log is informational; a leader superseded at once learns it from its guard.
        with contextlib.suppress(ConnectionLostError, FencedError):
            record_event(
                c.consensus,
                "leader",
                fence=leadership.fence,
                process_id=c.process_id,
                deploy_generation=c.deploy_generation,
                epoch=leadership.epoch,
            )
        return leadership

    def _take_over_attempt(self, bootstrap: bool) -> Leadership | None:
        c = self._candidacy
        candidate = c.candidate
        if candidate is None:
            return None
        found = c.consensus.get_many([PROMOTION_KEY, EPOCH_KEY, CATALOG_KEY])
        promotion = found[PROMOTION_KEY]
        catalog_found = found[CATALOG_KEY]
        catalog = (
            CatalogState.decode(catalog_found.value)
            if catalog_found is not None and catalog_found.value
            else None
        )
        target = promotion_of(promotion)
        if target is None:
            if not (bootstrap and catalog is None):
                return None
            # Bootstrap of an empty environment: promote ourselves first (a CAS create; a
            # concurrent bootstrapper's create wins and this attempt re-reads).
            asked = Promotion(c.deploy_generation, f"bootstrap:{c.process_id}", time.time())
            c.consensus.cas(PROMOTION_KEY, asked.encode(), -1)
            promotion = c.consensus.get(PROMOTION_KEY)
            target = promotion_of(promotion)
        if target is None or promotion is None:
            return None
        fenced = generation_fence(
            c.deploy_generation,
            catalog=None if catalog is None else catalog.deploy_generation,
            promoted=target,
            acting="cannot take over",
        )
        if fenced is not None:
            raise fenced
        # The catalog read here is checked by the commit below (same generation), or moved to
        # ours and bound to our release by it: a generation never leads for two releases.
        taken = release_fence(c.deploy_generation, c.release, catalog, promoted=target)
        if taken is not None:
            raise taken
        if target < c.deploy_generation:
            return None
        names = c.consensus.children(candidate_key(c.deploy_generation))
        own = candidate.rsplit("/", 1)[-1]
        if not names or min(names, key=candidate_seq) != own:
            return None
        stat = c.own_candidate_stat(candidate)
        if stat is None:
            return None
        epoch_found = found[EPOCH_KEY]
        previous = EpochInfo.from_versioned(epoch_found) if epoch_found is not None else None
        assert c.session_id is not None
        if (
            previous is not None
            and previous.leader == c.process_id
            and previous.session == session_hex(c.session_id)
            and previous.deploy_generation == c.deploy_generation
            and (catalog is None or catalog.deploy_generation == c.deploy_generation)
        ):
            # Our own takeover landed but its answer was lost (a retried attempt): adopt it.
            return self._leadership_at(previous.epoch, previous.version)
        number = (previous.epoch if previous is not None else 0) + 1
        epoch_value = encode_json(
            {
                "epoch": number,
                "leader": c.process_id,
                "deploy_generation": c.deploy_generation,
                "session": session_hex(c.session_id),
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "taken_over_at": time.time(),
            }
        )
        ops: list[Op] = [
            Create(EPOCH_KEY, epoch_value)
            if epoch_found is None
            else SetData(EPOCH_KEY, epoch_value, epoch_found.version)
        ]
        if catalog is not None and catalog_found is not None:
            if catalog.deploy_generation == c.deploy_generation:
                ops.append(Check(CATALOG_KEY, catalog_found.version))
            else:
                moved = attrs.evolve(
                    catalog, deploy_generation=c.deploy_generation, generation_release=c.release
                )
                ops.append(catalog_write_op(moved, catalog_found.version))
        ops.append(Check(PROMOTION_KEY, promotion.version))
        ops.append(Check(candidate, stat.version))
        results = c.consensus.commit(ops)
        version = 0 if epoch_found is None else int(results[0].version)
        return self._leadership_at(number, version)

    def _leadership_at(self, epoch: int, version: int) -> Leadership:
        c = self._candidacy
        return Leadership(
            process_id=c.process_id,
            deploy_generation=c.deploy_generation,
            epoch=epoch,
            fence=Fence(EPOCH_KEY, version),
            guard=c.leadership_guard,
        )
