//! One module per subcommand.
pub mod exec;
pub mod judge;
pub mod generate;
