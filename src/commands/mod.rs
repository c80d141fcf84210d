//! One module per subcommand.
pub mod exec;
