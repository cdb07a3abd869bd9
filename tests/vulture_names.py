"""Names ``vulture`` (run by ``make check``) cannot see used, each with how it is used.

Vulture reads the code for unused functions, methods and variables. These are used by name at
run time, not in the text: it would flag them.
"""

from orchestrator.process_node import ProcessNode
from orchestrator.scenario.simulate.fault_moves import FaultMoves
from orchestrator.scenario.simulate.moves import UpgradeMoves
from orchestrator.sidecar.api import SidecarApp

USED_BY_NAME = (
    # The randomized walk picks a move by its name (``walker.py``: ``getattr(moves, kind)``).
    UpgradeMoves.abort,
    UpgradeMoves.start_older,
    UpgradeMoves.start_stale,
    UpgradeMoves.sustain,
    FaultMoves.kill_checking,
    FaultMoves.kill_follower,
    FaultMoves.kill_leader,
    FaultMoves.kill_mid_migration,
    FaultMoves.lost_answer,
    FaultMoves.partition_leader,
    FaultMoves.zookeeper_server,
    FaultMoves.partition_zookeeper,
    FaultMoves.expire_follower,
    FaultMoves.expire_leader,
    # The HTTP routes name their endpoint methods.
    SidecarApp.readyz,
    # A field of the process node's JSON, read by other processes.
    ProcessNode.heartbeat,
)
