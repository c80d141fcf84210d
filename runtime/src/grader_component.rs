//! Grader components: an environment package's own reward, as a WebAssembly component of the `grader`
//! world (`wit/agentrt-tools.wit`), in any language the tool templates build. Each answer is graded in a
//! fresh instance under the bounds it is given (fuel, memory, wall time), with no files, network, clock
//! or environment: a grader that hangs or allocates without bound fails that answer's grade, named by
//! the bound, and nothing else.

use crate::component_cache::ComponentCache;
use crate::limits::Limits;
use crate::plugins::{explain_failure, plugin_store, PluginState};
use crate::report::Limit;
use crate::SandboxError;
use std::path::{Path, PathBuf};
use wasmtime::component::Linker;
use wasmtime::Engine;

/// Host bindings of the `grader` world: its types are checked once, when a grader is loaded.
mod bindings {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "grader",
        exports: { default: async },
    });
}

/// A loaded grader component, ready to grade.
pub struct GraderComponent {
    path: PathBuf,
    pre: bindings::GraderPre<PluginState>,
}

/// What a grader component said of one answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ComponentGrade {
    /// The reward's named parts, in the grader's order; the reward is their sum.
    pub parts: Vec<(String, f32)>,
    /// Whether the answer counts as correct.
    pub correct: bool,
}

/// Why a grader component gave no grade for one answer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GradeFailure {
    /// It ran past one of its bounds.
    #[error("the grader {file} ran past its {limit} limit")]
    Limit {
        /// The grader's file name.
        file: String,
        /// Which bound.
        limit: Limit,
    },
    /// It trapped (a panic, an uncaught exception), with its stderr's last lines.
    #[error("the grader {file} crashed: {message}")]
    Crashed {
        /// The grader's file name.
        file: String,
        /// The cause and the tail of its stderr.
        message: String,
    },
    /// It returned an error: it cannot grade this task.
    #[error("the grader {file} refused to grade: {message}")]
    Refused {
        /// The grader's file name.
        file: String,
        /// Its message.
        message: String,
    },
    /// It returned a reward part that is not a finite number.
    #[error("the grader {file} returned the reward part `{part}` = {value}, not a finite number")]
    NotFinite {
        /// The grader's file name.
        file: String,
        /// The part's name.
        part: String,
        /// What it returned.
        value: f32,
    },
}

impl GraderComponent {
    /// Loads the grader at `path` (compiled once through `cache`). A file that is not a component, imports
    /// what the host does not give (anything but WASI without authority), or does not export `grading`
    /// is an error naming the file.
    pub fn load(engine: &Engine, cache: &ComponentCache, path: &Path) -> Result<Self, SandboxError> {
        let origin = path.display().to_string();
        let wasm = std::fs::read(path).map_err(|source| SandboxError::Io { path: path.to_path_buf(), source })?;
        let component = cache.load(engine, &wasm, &origin)?;
        let mut linker = Linker::<PluginState>::new(engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(|e| SandboxError::Engine(format!("{e:#}")))?;
        let pre = linker.instantiate_pre(&component).map_err(|e| SandboxError::unsatisfied_import(&origin, e))?;
        let pre = bindings::GraderPre::new(pre).map_err(|e| SandboxError::WrongWorld {
            origin: origin.clone(),
            world: "grader",
            reason: format!("it must export `grading.grade`: {e:#}"),
        })?;
        Ok(GraderComponent { path: path.to_path_buf(), pre })
    }

    /// The grader's file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Grades `answer` against `task` (the task's row, as JSON text) in a fresh instance bounded by
    /// `limits` (fuel, memory, wall time; the output and tool-call bounds do not apply: a grader calls
    /// no tools, and what it prints is dropped).
    pub async fn grade(&self, task: &str, answer: &str, limits: Limits) -> Result<ComponentGrade, GradeFailure> {
        let file = self.path.file_name().map_or_else(|| self.path.display().to_string(), |f| f.to_string_lossy().into_owned());
        let mut store = plugin_store(self.pre.engine(), limits);
        let call = async {
            let grader = self.pre.instantiate_async(&mut store).await?;
            grader.agentrt_tools_grading().call_grade(&mut store, task, answer).await
        };
        let returned = match call.await {
            Ok(returned) => returned,
            Err(error) => {
                return Err(match Limit::hit_by(&error, store.data().memory.exceeded) {
                    Some(limit) => GradeFailure::Limit { file, limit },
                    None => GradeFailure::Crashed { file, message: explain_failure(&error, store.data()) },
                });
            }
        };
        let grade = returned.map_err(|message| GradeFailure::Refused { file: file.clone(), message })?;
        let mut parts = Vec::with_capacity(grade.parts.len());
        for part in grade.parts {
            // A part that is not finite would poison training's advantages.
            if !part.value.is_finite() {
                return Err(GradeFailure::NotFinite { file, part: part.name, value: part.value });
            }
            parts.push((part.name, part.value));
        }
        Ok(ComponentGrade { parts, correct: grade.correct })
    }
}
