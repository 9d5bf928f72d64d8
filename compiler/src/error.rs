//! One error type for the whole pipeline, so every failure reaches the user as a single
//! message that names the file, the node and the op involved.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum NncError {
    #[error("{path}: cannot read: {source}")]
    Io {
        path: PathBuf,
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
    /// Wraps any of the above with the file it came from.
    #[error("{path}: {source}")]
    InFile {
        path: PathBuf,
        #[source]
        source: Box<NncError>,
    },
}

#[derive(Debug, Clone)]
pub struct UnsupportedOp {
    pub node: String,
    pub op: String,
    pub reason: String,
}

pub type Result<T, E = NncError> = std::result::Result<T, E>;

impl NncError {
    pub fn node(node: &str, op: &str, message: impl Into<String>) -> Self {
        NncError::Node {
            node: node.to_string(),
            op: op.to_string(),
            message: message.into(),
        }
    }

    /// Attaches the model file's path, once (nested wrapping would repeat it).
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
