"""Message types only the HIL log uses (std_msgs/String for its event channel).

(No `from __future__ import annotations` here: cyclonedds reads the field types at run time.)
"""

from dataclasses import dataclass

import cyclonedds.idl.annotations as annotate
from cyclonedds.idl import IdlStruct

from simreal.deploy.messages import ros_typename


@dataclass
@annotate.final
class String(IdlStruct, typename=ros_typename("std_msgs/msg/String")):
    data: str = ""
