//! Where a job's ranks run, and which device joins each pair of them.
//!
//! Three ways to say where: `--hosts a:2,b:2` ([`hosts::parse_spec`]), a
//! host file with one host per line ([`hosts::parse_file`]), or a topology
//! file of clusters, their hosts and their networks ([`Topology`], the
//! format of PMv2's Figure 7.2, docs/TOPOLOGY.md). All three give a list
//! of [`HostEntry`]s that [`place`] turns into a host per rank; a topology
//! then plans each rank's destination device table ([`Topology::plan`]).
//! Every error is one line that names the file and line it comes from.

#[doc(hidden)]
pub mod fuzz;
pub mod hosts;
pub mod topology;

pub use hosts::{place, HostEntry, Origin};
pub use topology::{RankPlan, Topology};
