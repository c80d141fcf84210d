//! One module per subcommand.
pub mod exec;
pub mod judge;
