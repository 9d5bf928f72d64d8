//! One error type for the whole pipeline, so every failure reaches the user as a single
//! message that names the file, the node and the op involved.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum NncError {
    /// A file could not be read or written; `action` says which.
    #[error("{path}: cannot {action}: {source}")]
    Io {
        path: PathBuf,
        action: IoAction,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not a valid ONNX model (protobuf decode failed: {source})")]
    Decode {
        path: PathBuf,
        #[source]
        source: prost::DecodeError,
    },
    /// A problem with one node: bad attribute, impossible shape, wrong input count...
    #[error("node '{node}' ({op}): {message}")]
    Node {
        node: String,
        op: String,
        message: String,
        /// The node's operands and attributes, for diagnostics that quote it.
        excerpt: Option<Box<NodeExcerpt>>,
    },
    /// Every op nnc cannot compile, gathered in one pass so the user sees all at once.
    #[error("unsupported operators:\n{}", .0.iter().map(|u| format!("  node '{}' ({}): {}", u.node, u.op, u.reason)).collect::<Vec<_>>().join("\n"))]
    Unsupported(Vec<UnsupportedOp>),
    /// A model-level problem not tied to a node (unbound dimension, missing graph...).
    #[error("{0}")]
    Model(String),
    #[error("code generation failed in {context}: {message}")]
    Codegen { context: String, message: String },
    #[error("writing {kind}: {message}")]
    Artifact { kind: String, message: String },
    /// A graph pass failed, or the pass list names no such pass.
    #[error(transparent)]
    Passes(#[from] crate::passes::PassError),
    /// `--quantize int8` failed.
    #[error("--quantize int8: {0}")]
    Int8(#[from] crate::quant::QuantError),
    /// Wraps any of the above with the file it came from.
    #[error("{path}: {source}")]
    InFile {
        path: PathBuf,
        #[source]
        source: Box<NncError>,
    },
}

/// What nnc was doing with a file when an I/O error struck.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoAction {
    Read,
    Write,
}

impl std::fmt::Display for IoAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            IoAction::Read => "read",
            IoAction::Write => "write",
        })
    }
}

#[derive(Debug, Clone)]
pub struct UnsupportedOp {
    pub node: String,
    pub op: String,
    pub reason: String,
    /// The node's operands and attributes, for diagnostics that quote it.
    pub excerpt: NodeExcerpt,
}

/// What a diagnostic quotes of a node, like a compiler quoting a source line: its
/// operands (with their types when known) and attributes, already rendered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeExcerpt {
    /// `x` or `x: float32[3,4]`; an omitted optional input is an empty string.
    pub inputs: Vec<String>,
    /// Like `inputs`.
    pub outputs: Vec<String>,
    /// `name=value`, in the model's order.
    pub attributes: Vec<String>,
}

impl NodeExcerpt {
    /// One line: `y = Op<attr=1, ...>(x: float32[3,4], w)`.
    pub fn render(&self, op: &str) -> String {
        let mut line = String::new();
        if !self.outputs.is_empty() {
            line.push_str(&self.outputs.join(", "));
            line.push_str(" = ");
        }
        line.push_str(op);
        if !self.attributes.is_empty() {
            line.push('<');
            line.push_str(&self.attributes.join(", "));
            line.push('>');
        }
        line.push('(');
        line.push_str(&self.inputs.join(", "));
        line.push(')');
        line
    }
}

pub type Result<T, E = NncError> = std::result::Result<T, E>;

impl NncError {
    /// Reading `path` failed.
    pub fn read(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        NncError::Io {
            path: path.into(),
            action: IoAction::Read,
            source,
        }
    }

    /// Writing (or creating) `path` failed.
    pub fn write(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        NncError::Io {
            path: path.into(),
            action: IoAction::Write,
            source,
        }
    }

    pub fn node(node: &str, op: &str, message: impl Into<String>) -> Self {
        NncError::Node {
            node: node.to_string(),
            op: op.to_string(),
            message: message.into(),
            excerpt: None,
        }
    }

    /// Attaches a node excerpt to a [`NncError::Node`] that has none (other errors are
    /// returned unchanged).
    pub fn with_excerpt(self, excerpt: impl FnOnce() -> NodeExcerpt) -> Self {
        match self {
            NncError::Node {
                node,
                op,
                message,
                excerpt: None,
            } => NncError::Node {
                node,
                op,
                message,
                excerpt: Some(Box::new(excerpt())),
            },
            e => e,
        }
    }

    /// The model file an error names ([`NncError::InFile`], `Io`, `Decode`).
    pub fn file(&self) -> Option<&std::path::Path> {
        match self {
            NncError::InFile { path, .. }
            | NncError::Io { path, .. }
            | NncError::Decode { path, .. } => Some(path),
            _ => None,
        }
    }

    /// The error without its [`NncError::InFile`] wrapper.
    pub fn innermost(&self) -> &NncError {
        match self {
            NncError::InFile { source, .. } => source.innermost(),
            e => e,
        }
    }

    /// Attaches the model file's path, once (nested wrapping would repeat it).
    /// Whether this is a list of unsupported operators (in a file or not).
    pub fn unsupported_ops(&self) -> bool {
        match self {
            NncError::Unsupported(_) => true,
            NncError::InFile { source, .. } => source.unsupported_ops(),
            _ => false,
        }
    }

    pub fn in_file(self, path: impl Into<PathBuf>) -> Self {
        match self {
            e @ (NncError::InFile { .. } | NncError::Io { .. } | NncError::Decode { .. }) => e,
            e => NncError::InFile {
                path: path.into(),
                source: Box::new(e),
            },
        }
    }
}
