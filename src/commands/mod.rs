//! One module per subcommand.
pub mod bench;
pub mod cache;
pub mod env;
pub mod eval;
pub mod exec;
pub mod generate;
pub mod index;
pub mod judge;
pub mod plot;
pub mod scaffold;
pub mod search;
pub mod serve;
pub mod sft;
pub mod sweep;
pub mod tool;
pub mod train;
pub mod trajectories;
