"""jointdyn: rigid-body joints and dynamics on JAX."""

from . import optimal_control  # a public module: jd.optimal_control.solve, …
from ._autodiff import differentiation_rules
from ._batch_last import batch_last
from ._batching import (
    batched,
    device_put_batched,
)
from ._bundled import (
    list_models,
    load_contact,
    load_model,
)
from ._compile import (
    compiler_options,
    jit,
    xla_flags,
)
from ._composite import Composite
from ._contact import (
    GroundContact,
    contact_forces,
    contact_point_forces,
    contact_points_from_urdf,
)
from ._derivatives import (
    ABADerivatives,
    aba_derivatives,
    rnea_derivatives,
)
from ._dtype import astype
from ._dynamics import (
    aba,
    bias_forces,
    crba,
    forward_dynamics,
    gravity_forces,
    joint_forces,
    locked_dofs,
    locking_forces,
    rnea,
)
from ._identification import (
    BaseParameters,
    base_parameters,
    is_physical,
    least_squares,
)
from ._inertial_parameters import (
    inertial_parameters,
    inertial_parameters_from_log_cholesky,
    log_cholesky_from_inertial_parameters,
    pseudo_inertia,
    with_inertial_parameters,
)
from ._joint import (
    AbstractJoint,
    JointParams,
)
from ._joints_rotation import (
    Ball,
    Free,
    RevoluteUnbounded,
    SpaceXYZ,
)
from ._joints_vector import (
    AbstractVectorJoint,
    Cylindrical,
    Gimbal,
    Planar,
    Prismatic,
    Revolute,
    Screw,
    Translational,
    Universal,
    Weld,
)
from ._kinematics import (
    Kinematics,
    body_jacobians,
    center_of_mass,
    centroidal_momentum,
    forward_kinematics,
    jacobian,
    kinetic_energy,
    potential_energy,
)
from ._low_latency import use_low_latency_cpu
from ._model import (
    Model,
    ModelBuilder,
    Topology,
)
from ._mujoco import (
    contact_points_from_mujoco,
    from_mujoco,
    from_mujoco_state,
    load_mjcf,
    to_mujoco_state,
)
from ._packed import (
    PackedModel,
    pack,
)
from ._reduced import (
    expand_configuration,
    expand_velocity,
    reduced_indices,
    reduced_model,
)
from ._regressor import (
    joint_parameters,
    joint_regressor,
    regressor,
    with_joint_parameters,
)
from ._scan import checkpointed_scan
from ._simulation import (
    Trajectory,
    rollout,
    step,
    vector_field,
)
from ._spatial import (
    SpatialInertia,
    Transform,
    force_cross,
    motion_cross,
    quat_to_rotmat,
    rotmat_to_quat,
    so3_exp,
    so3_log,
)
from ._step_derivatives import (
    StepDerivatives,
    step_derivatives,
)
from ._urdf import load_urdf
from ._velocity_bounds import body_velocity_bounds

__version__ = "0.1.0"

__all__ = [
    "optimal_control",
    "GroundContact",
    "load_contact",
    "contact_forces",
    "contact_point_forces",
    "contact_points_from_urdf",
    "Trajectory",
    "rollout",
    "step",
    "vector_field",
    "StepDerivatives",
    "step_derivatives",
    "SpatialInertia",
    "Transform",
    "force_cross",
    "motion_cross",
    "quat_to_rotmat",
    "rotmat_to_quat",
    "so3_exp",
    "so3_log",
    "AbstractJoint",
    "JointParams",
    "AbstractVectorJoint",
    "Cylindrical",
    "Gimbal",
    "Planar",
    "Prismatic",
    "Revolute",
    "Screw",
    "Translational",
    "Universal",
    "Weld",
    "Ball",
    "Free",
    "RevoluteUnbounded",
    "SpaceXYZ",
    "Composite",
    "Model",
    "ModelBuilder",
    "Topology",
    "PackedModel",
    "pack",
    "load_urdf",
    "load_mjcf",
    "from_mujoco",
    "from_mujoco_state",
    "to_mujoco_state",
    "contact_points_from_mujoco",
    "list_models",
    "load_model",
    "Kinematics",
    "body_jacobians",
    "center_of_mass",
    "centroidal_momentum",
    "forward_kinematics",
    "jacobian",
    "kinetic_energy",
    "potential_energy",
    "aba",
    "bias_forces",
    "crba",
    "forward_dynamics",
    "gravity_forces",
    "joint_forces",
    "locked_dofs",
    "locking_forces",
    "rnea",
    "ABADerivatives",
    "aba_derivatives",
    "rnea_derivatives",
    "body_velocity_bounds",
    "expand_configuration",
    "expand_velocity",
    "reduced_indices",
    "reduced_model",
    "differentiation_rules",
    "batched",
    "device_put_batched",
    "batch_last",
    "checkpointed_scan",
    "compiler_options",
    "xla_flags",
    "jit",
    "astype",
    "use_low_latency_cpu",
    "inertial_parameters",
    "inertial_parameters_from_log_cholesky",
    "log_cholesky_from_inertial_parameters",
    "pseudo_inertia",
    "with_inertial_parameters",
    "joint_parameters",
    "joint_regressor",
    "regressor",
    "with_joint_parameters",
    "BaseParameters",
    "base_parameters",
    "is_physical",
    "least_squares",
]
