//! Random ONNX models for end-to-end tests, built with nnc's own protobuf types so the
//! tests exercise the importer too. Weights and shapes come from a seeded generator.

#![allow(dead_code)]

use nnc::onnx::proto::{
    attribute_type, tensor_shape_proto, type_proto, AttributeProto, GraphProto, ModelProto,
    NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
};
use prost::Message;

/// xorshift64*: small, seeded, good enough for test data.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in [-1, 1).
    pub fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
    pub fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.uniform() * scale).collect()
    }
}

pub struct ModelBuilder {
    pub graph: GraphProto,
    counter: usize,
    pub rng: Rng,
}

pub enum Attr {
    I(i64),
    F(f32),
    S(&'static str),
    Ints(Vec<i64>),
    /// A subgraph (an `If`'s branch), built with [`ModelBuilder::branch`].
    G(GraphProto),
    /// An int64 scalar tensor (ConstantOfShape's `value`).
    I64Tensor(i64),
}

impl ModelBuilder {
    pub fn new(seed: u64) -> ModelBuilder {
        ModelBuilder {
            graph: GraphProto {
                name: "test".into(),
                ..Default::default()
            },
            counter: 0,
            rng: Rng::new(seed),
        }
    }

    fn fresh(&mut self, prefix: &str) -> String {
        self.counter += 1;
        format!("{prefix}{}", self.counter)
    }

    pub fn input(&mut self, name: &str, shape: &[usize]) -> String {
        self.graph.input.push(value_info(name, 1, shape));
        name.to_string()
    }

    /// An input of ONNX element type `elem_type` (e.g. 7 for int64).
    pub fn typed_input(&mut self, name: &str, elem_type: i32, shape: &[usize]) -> String {
        self.graph.input.push(value_info(name, elem_type, shape));
        name.to_string()
    }

    pub fn output(&mut self, name: &str) {
        self.graph.output.push(ValueInfoProto {
            name: name.to_string(),
            r#type: None,
        });
    }

    pub fn weight(&mut self, shape: &[usize], scale: f32) -> String {
        let n: usize = shape.iter().product();
        let data = self.rng.vec(n, scale);
        self.float_init(shape, data)
    }

    pub fn float_init(&mut self, shape: &[usize], data: Vec<f32>) -> String {
        let name = self.fresh("w");
        self.graph.initializer.push(TensorProto {
            name: name.clone(),
            dims: shape.iter().map(|&d| d as i64).collect(),
            data_type: 1,
            raw_data: data.iter().flat_map(|v| v.to_le_bytes()).collect(),
            ..Default::default()
        });
        name
    }

    pub fn int_init(&mut self, data: &[i64]) -> String {
        let name = self.fresh("i");
        self.graph.initializer.push(TensorProto {
            name: name.clone(),
            dims: vec![data.len() as i64],
            data_type: 7,
            int64_data: data.to_vec(),
            ..Default::default()
        });
        name
    }

    pub fn node(&mut self, op: &str, inputs: &[&str], attrs: Vec<(&str, Attr)>) -> String {
        let out = self.fresh("t");
        let attribute = attrs
            .into_iter()
            .map(|(n, a)| {
                let mut p = AttributeProto {
                    name: n.to_string(),
                    ..Default::default()
                };
                match a {
                    Attr::I(i) => {
                        p.r#type = attribute_type::INT;
                        p.i = i;
                    }
                    Attr::F(f) => {
                        p.r#type = attribute_type::FLOAT;
                        p.f = f;
                    }
                    Attr::S(s) => {
                        p.r#type = attribute_type::STRING;
                        p.s = s.as_bytes().to_vec();
                    }
                    Attr::Ints(v) => {
                        p.r#type = attribute_type::INTS;
                        p.ints = v;
                    }
                    Attr::G(g) => {
                        p.r#type = attribute_type::GRAPH;
                        p.g = Some(Box::new(g));
                    }
                    Attr::I64Tensor(v) => {
                        p.r#type = attribute_type::TENSOR;
                        p.t = Some(TensorProto {
                            dims: vec![1],
                            data_type: 7,
                            int64_data: vec![v],
                            ..Default::default()
                        });
                    }
                }
                p
            })
            .collect();
        self.graph.node.push(NodeProto {
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: vec![out.clone()],
            name: format!("{op}_{}", self.counter),
            op_type: op.to_string(),
            attribute,
            ..Default::default()
        });
        out
    }

    /// A node with `n` outputs (an empty name for an omitted one is not needed here):
    /// their names, in order.
    pub fn node_n(
        &mut self,
        op: &str,
        inputs: &[&str],
        attrs: Vec<(&str, Attr)>,
        n: usize,
    ) -> Vec<String> {
        let first = self.node(op, inputs, attrs);
        let node = self.graph.node.last_mut().expect("just added");
        for k in 1..n {
            node.output.push(format!("{first}_{k}"));
        }
        node.output.clone()
    }

    /// A subgraph whose nodes `build` adds (they may read this graph's values), its
    /// outputs the names `build` returns.
    pub fn branch(&mut self, build: impl FnOnce(&mut ModelBuilder) -> Vec<String>) -> GraphProto {
        let name = self.fresh("branch");
        let outer = std::mem::replace(
            &mut self.graph,
            GraphProto {
                name,
                ..Default::default()
            },
        );
        let outputs = build(self);
        let mut g = std::mem::replace(&mut self.graph, outer);
        g.output = (outputs.iter())
            .map(|n| ValueInfoProto {
                name: n.clone(),
                r#type: None,
            })
            .collect();
        g
    }

    pub fn encode(self) -> Vec<u8> {
        ModelProto {
            ir_version: 8,
            opset_import: vec![OperatorSetIdProto {
                domain: String::new(),
                version: 17,
            }],
            producer_name: "nnc-tests".into(),
            graph: Some(self.graph),
            ..Default::default()
        }
        .encode_to_vec()
    }
}

fn value_info(name: &str, elem_type: i32, shape: &[usize]) -> ValueInfoProto {
    let dim = shape
        .iter()
        .map(|&d| tensor_shape_proto::Dimension {
            value: Some(tensor_shape_proto::dimension::Value::DimValue(d as i64)),
        })
        .collect();
    ValueInfoProto {
        name: name.to_string(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type,
                shape: Some(TensorShapeProto { dim }),
            })),
        }),
    }
}

/// A small CNN: conv/bn/relu/pool, a depthwise conv, a residual add, global pooling
/// and a classifier.
pub fn cnn(seed: u64) -> (Vec<u8>, Vec<usize>) {
    let mut m = ModelBuilder::new(seed);
    let c = 4 + m.rng.below(6);
    let hw = 9 + m.rng.below(8);
    let shape = vec![1, 3, hw, hw];
    let x = m.input("image", &shape);
    let w1 = m.weight(&[c, 3, 3, 3], 0.5);
    let b1 = m.weight(&[c], 0.1);
    let y = m.node(
        "Conv",
        &[&x, &w1, &b1],
        vec![
            ("pads", Attr::Ints(vec![1, 1, 1, 1])),
            ("strides", Attr::Ints(vec![1, 1])),
        ],
    );
    let (s, bb, mean) = (
        m.weight(&[c], 1.0),
        m.weight(&[c], 0.2),
        m.weight(&[c], 0.2),
    );
    let var: Vec<f32> = (0..c).map(|i| 0.5 + 0.1 * i as f32).collect();
    let var = m.float_init(&[c], var);
    let y = m.node("BatchNormalization", &[&y, &s, &bb, &mean, &var], vec![]);
    let y = m.node("Relu", &[&y], vec![]);
    let p = m.node(
        "MaxPool",
        &[&y],
        vec![
            ("kernel_shape", Attr::Ints(vec![3, 3])),
            ("strides", Attr::Ints(vec![2, 2])),
            ("pads", Attr::Ints(vec![1, 1, 1, 1])),
        ],
    );
    let wd = m.weight(&[c, 1, 3, 3], 0.5);
    let d = m.node(
        "Conv",
        &[&p, &wd],
        vec![
            ("pads", Attr::Ints(vec![1, 1, 1, 1])),
            ("group", Attr::I(c as i64)),
        ],
    );
    let d = m.node("Clip", &[&d], vec![]);
    let r = m.node("Add", &[&d, &p], vec![]);
    let w2 = m.weight(&[2 * c, c, 1, 1], 0.5);
    let r = m.node("Conv", &[&r, &w2], vec![]);
    let r = m.node("HardSwish", &[&r], vec![]);
    let g = m.node("GlobalAveragePool", &[&r], vec![]);
    let f = m.node("Flatten", &[&g], vec![]);
    let wf = m.weight(&[10, 2 * c], 0.5);
    let bf = m.weight(&[10], 0.1);
    let logits = m.node("Gemm", &[&f, &wf, &bf], vec![("transB", Attr::I(1))]);
    let out = m.node("Softmax", &[&logits], vec![("axis", Attr::I(-1))]);
    m.output(&out);
    (m.encode(), shape)
}

/// A transformer-style block: matmul + bias, layer norm, GELU, attention-like softmax.
pub fn transformer(seed: u64) -> (Vec<u8>, Vec<usize>) {
    let mut m = ModelBuilder::new(seed);
    let t = 5 + m.rng.below(8);
    let d = 8 + 4 * m.rng.below(4);
    let shape = vec![1, t, d];
    let x = m.input("tokens", &shape);
    let wq = m.weight(&[d, d], 0.3);
    let wk = m.weight(&[d, d], 0.3);
    let q = m.node("MatMul", &[&x, &wq], vec![]);
    let k = m.node("MatMul", &[&x, &wk], vec![]);
    let kt = m.node(
        "Transpose",
        &[&k],
        vec![("perm", Attr::Ints(vec![0, 2, 1]))],
    );
    let s = m.node("MatMul", &[&q, &kt], vec![]);
    let a = m.node("Softmax", &[&s], vec![("axis", Attr::I(-1))]);
    let v = m.node("MatMul", &[&a, &x], vec![]);
    let r = m.node("Add", &[&v, &x], vec![]);
    let g = m.weight(&[d], 1.0);
    let bt = m.weight(&[d], 0.1);
    let n = m.node(
        "LayerNormalization",
        &[&r, &g, &bt],
        vec![("axis", Attr::I(-1))],
    );
    let w1 = m.weight(&[d, 2 * d], 0.3);
    let b1 = m.weight(&[2 * d], 0.1);
    let h = m.node("MatMul", &[&n, &w1], vec![]);
    let h = m.node("Add", &[&h, &b1], vec![]);
    let h = m.node("Erf", &[&h], vec![]);
    let shape_c = m.int_init(&[1, t as i64, 2, d as i64]);
    let h = m.node("Reshape", &[&h, &shape_c], vec![]);
    let axes = m.int_init(&[2]);
    let h = m.node("ReduceMean", &[&h, &axes], vec![("keepdims", Attr::I(0))]);
    let h = m.node("Tanh", &[&h], vec![]);
    m.output(&h);
    (m.encode(), shape)
}

/// Elementwise ops with broadcasting over odd shapes.
pub fn elementwise(seed: u64) -> (Vec<u8>, Vec<usize>) {
    let mut m = ModelBuilder::new(seed);
    let a = 2 + m.rng.below(3);
    let b = 3 + m.rng.below(7);
    let shape = vec![a, 1, b];
    let x = m.input("x", &shape);
    let w = m.weight(&[3, 1], 1.0);
    let y = m.node("Mul", &[&x, &w], vec![]);
    let y = m.node("Sigmoid", &[&y], vec![]);
    let e = m.node("Exp", &[&x], vec![]);
    let y = m.node("Sub", &[&y, &e], vec![]);
    let y = m.node("LeakyRelu", &[&y], vec![("alpha", Attr::F(0.1))]);
    let pads = m.int_init(&[0, 1, 2, 0, 1, 1]);
    let p = m.node("Pad", &[&y, &pads], vec![("mode", Attr::S("reflect"))]);
    let (starts, ends, axes, steps) = (
        m.int_init(&[-1]),
        m.int_init(&[-1000]),
        m.int_init(&[2]),
        m.int_init(&[-2]),
    );
    let s = m.node("Slice", &[&p, &starts, &ends, &axes, &steps], vec![]);
    let c = m.node("Concat", &[&s, &s], vec![("axis", Attr::I(1))]);
    m.output(&c);
    (m.encode(), shape)
}
