"""jointdyn: rigid-body joints and dynamics on JAX."""

from ._composite import Composite as Composite
from ._joint import AbstractJoint as AbstractJoint
from ._joint import JointParams as JointParams
from ._joints_rotation import (
    Ball as Ball,
)
from ._joints_rotation import (
    Free as Free,
)
from ._joints_rotation import (
    RevoluteUnbounded as RevoluteUnbounded,
)
from ._joints_rotation import (
    SpaceXYZ as SpaceXYZ,
)
from ._joints_vector import (
    AbstractVectorJoint as AbstractVectorJoint,
)
from ._joints_vector import (
    Cylindrical as Cylindrical,
)
from ._joints_vector import (
    Gimbal as Gimbal,
)
from ._joints_vector import (
    Planar as Planar,
)
from ._joints_vector import (
    Prismatic as Prismatic,
)
from ._joints_vector import (
    Revolute as Revolute,
)
from ._joints_vector import (
    Screw as Screw,
)
from ._joints_vector import (
    Translational as Translational,
)
from ._joints_vector import (
    Universal as Universal,
)
from ._joints_vector import (
    Weld as Weld,
)
from ._misc import astype as astype
from ._spatial import (
    SpatialInertia as SpatialInertia,
)
from ._spatial import (
    Transform as Transform,
)
from ._spatial import (
    force_cross as force_cross,
)
from ._spatial import (
    motion_cross as motion_cross,
)
from ._spatial import (
    quat_to_rotmat as quat_to_rotmat,
)
from ._spatial import (
    rotmat_to_quat as rotmat_to_quat,
)
from ._spatial import (
    so3_exp as so3_exp,
)
from ._spatial import (
    so3_log as so3_log,
)

__version__ = "0.1.0"
