//! Which algorithm runs when: MPICH's rules of thumb (Thakur,
//! Rabenseifner and Gropp 2005), measured again on fm
//! (docs/PERFORMANCE.md), each overridable by name (`FM_COLL_BCAST`,
//! `FM_COLL_ALLREDUCE`, `FM_COLL_ALLGATHER` and their thresholds,
//! docs/CONFIG.md). A named algorithm that cannot run on the call's shape
//! falls back to one that can.

use crate::algorithms;
use crate::plan::{Plan, Span};

/// Where `auto` changes algorithm (bytes of the whole vector or message).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Choice {
    /// Broadcasts this long and longer, on 4 or more members, scatter and
    /// allgather instead of a binomial tree.
    pub bcast_long: usize,
    /// Allreduces this long and longer (commutative operations, at least
    /// an element per member) reduce-scatter and allgather (Rabenseifner)
    /// instead of recursive doubling.
    pub allreduce_long: usize,
    /// Allgathers whose result is shorter than this, on a power-of-two
    /// number of members, go by recursive doubling instead of a ring.
    pub allgather_short: usize,
}

pub const CHOICE: Choice = Choice {
    bcast_long: 128 * 1024,
    allreduce_long: 8 * 1024,
    allgather_short: 512 * 1024,
};

/// An algorithm a setting names, or `Auto` (chosen by size).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Bcast {
    #[default]
    Auto,
    Binomial,
    ScatterAllgather,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Allreduce {
    #[default]
    Auto,
    RecursiveDoubling,
    Rabenseifner,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Allgather {
    #[default]
    Auto,
    RecursiveDoubling,
    Ring,
}

/// The algorithms chosen and where `Auto` switches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rules {
    pub bcast: Bcast,
    pub allreduce: Allreduce,
    pub allgather: Allgather,
    pub choice: Choice,
}

impl Default for Rules {
    fn default() -> Rules {
        Rules {
            bcast: Bcast::default(),
            allreduce: Allreduce::default(),
            allgather: Allgather::default(),
            choice: CHOICE,
        }
    }
}

impl Rules {
    /// Broadcast of `data` from `root` among the plan's members
    /// (elements of `unit` bytes).
    pub fn bcast<R>(&self, p: &mut Plan<R>, root: usize, data: Span, unit: usize) {
        let long = match self.bcast {
            Bcast::Auto => data.len >= self.choice.bcast_long,
            Bcast::Binomial => false,
            Bcast::ScatterAllgather => true,
        };
        if p.n >= 4 && long {
            algorithms::bcast_scatter_allgather(p, root, data, unit);
        } else {
            algorithms::bcast_binomial(p, root, data);
        }
    }

    /// Allreduce of each member's `input` into its `acc` (elements of
    /// `unit` bytes; `input` is only read and may be `acc` itself) among
    /// the plan's members; `commutative` says whether the operation may
    /// combine out of member order.
    pub fn allreduce<R>(
        &self,
        p: &mut Plan<R>,
        input: Span,
        acc: Span,
        unit: usize,
        commutative: bool,
    ) {
        let long = match self.allreduce {
            Allreduce::Auto => acc.len >= self.choice.allreduce_long,
            Allreduce::RecursiveDoubling => false,
            Allreduce::Rabenseifner => true,
        };
        // Rabenseifner's pieces need an element for each of the members
        // that exchange, and may combine out of member order.
        if long && commutative && acc.len / unit.max(1) >= 1 << p.n.ilog2() {
            algorithms::allreduce_rabenseifner(p, input, acc, unit);
        } else {
            if input != acc {
                p.copy(input, acc);
            }
            algorithms::allreduce_recursive_doubling(p, acc);
        }
    }

    /// Allgather of `blocks` (member i's at `blocks[i]`, its own filled).
    pub fn allgather<R>(&self, p: &mut Plan<R>, blocks: &[Span]) {
        let total: usize = blocks.iter().map(|b| b.len).sum();
        let doubling = match self.allgather {
            Allgather::Auto => total < self.choice.allgather_short,
            Allgather::RecursiveDoubling => true,
            Allgather::Ring => false,
        };
        if p.n.is_power_of_two() && doubling {
            algorithms::allgather_recursive_doubling(p, blocks);
        } else {
            algorithms::allgather_ring(p, blocks);
        }
    }
}

/// The value of `names` that `s` names, or an error listing them.
#[doc(hidden)]
pub fn named<T: Copy>(s: &str, names: &[(&str, T)]) -> Result<T, String> {
    match names.iter().find(|(n, _)| *n == s) {
        Some(&(_, v)) => Ok(v),
        None => {
            let all: Vec<&str> = names.iter().map(|(n, _)| *n).collect();
            Err(format!("expected one of {}", all.join(", ")))
        }
    }
}

/// `FromStr` for a setting's type: its values by name.
#[macro_export]
#[doc(hidden)]
macro_rules! by_name {
    ($t:ty { $($name:literal => $v:expr),* $(,)? }) => {
        impl std::str::FromStr for $t {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                $crate::choose::named(s, &[$(($name, $v)),*])
            }
        }
    };
}

by_name!(Bcast {
    "auto" => Bcast::Auto,
    "binomial" => Bcast::Binomial,
    "scatter-allgather" => Bcast::ScatterAllgather,
});

by_name!(Allreduce {
    "auto" => Allreduce::Auto,
    "recursive-doubling" => Allreduce::RecursiveDoubling,
    "rabenseifner" => Allreduce::Rabenseifner,
});

by_name!(Allgather {
    "auto" => Allgather::Auto,
    "recursive-doubling" => Allgather::RecursiveDoubling,
    "ring" => Allgather::Ring,
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_parse_their_names_and_refuse_others_listing_them() {
        assert_eq!(
            "scatter-allgather".parse::<Bcast>(),
            Ok(Bcast::ScatterAllgather)
        );
        assert_eq!("ring".parse::<Allgather>(), Ok(Allgather::Ring));
        let e = "tree".parse::<Allreduce>().unwrap_err();
        assert!(e.contains("auto, recursive-doubling, rabenseifner"), "{e}");
    }
}
