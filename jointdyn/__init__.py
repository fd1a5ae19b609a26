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
from ._autodiff import differentiation_rules as differentiation_rules
from ._batch_last import batch_last as batch_last
from ._batching import batched as batched
from ._batching import device_put_batched as device_put_batched
from ._bundled import list_models as list_models
from ._bundled import load_model as load_model
from ._derivatives import (
    ABADerivatives as ABADerivatives,
)
from ._derivatives import (
    aba_derivatives as aba_derivatives,
)
from ._derivatives import (
    rnea_derivatives as rnea_derivatives,
)
from ._dynamics import (
    aba as aba,
)
from ._dynamics import (
    bias_forces as bias_forces,
)
from ._dynamics import (
    crba as crba,
)
from ._dynamics import (
    forward_dynamics as forward_dynamics,
)
from ._dynamics import (
    gravity_forces as gravity_forces,
)
from ._dynamics import (
    joint_forces as joint_forces,
)
from ._dynamics import (
    locked_dofs as locked_dofs,
)
from ._dynamics import (
    locking_forces as locking_forces,
)
from ._dynamics import (
    rnea as rnea,
)
from ._kinematics import (
    Kinematics as Kinematics,
)
from ._kinematics import (
    body_jacobians as body_jacobians,
)
from ._kinematics import (
    center_of_mass as center_of_mass,
)
from ._kinematics import (
    centroidal_momentum as centroidal_momentum,
)
from ._kinematics import (
    forward_kinematics as forward_kinematics,
)
from ._kinematics import (
    jacobian as jacobian,
)
from ._kinematics import (
    kinetic_energy as kinetic_energy,
)
from ._kinematics import (
    potential_energy as potential_energy,
)
from ._misc import compiler_options as compiler_options
from ._misc import jit as jit
from ._misc import use_low_latency_cpu as use_low_latency_cpu
from ._model import Model as Model
from ._model import ModelBuilder as ModelBuilder
from ._model import Topology as Topology
from ._packed import PackedModel as PackedModel
from ._packed import pack as pack
from ._reduced import expand_configuration as expand_configuration
from ._reduced import expand_velocity as expand_velocity
from ._reduced import reduced_indices as reduced_indices
from ._reduced import reduced_model as reduced_model
from ._scan import checkpointed_scan as checkpointed_scan
from ._urdf import load_urdf as load_urdf
from ._velocity_bounds import body_velocity_bounds as body_velocity_bounds
