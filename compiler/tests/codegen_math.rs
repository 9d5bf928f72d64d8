//! Accuracy, special-value and lowering tests for `nnc::codegen::math`.
//!
//! Every emitter is JIT-compiled (host ISA with the CPU features the host has) into a loop
//! kernel `fn(in: *const T, out: *mut T, n: usize)` for each supported lane type (`F32`,
//! `F32X4`, `F64`, `F64X2`), run over dense input grids plus special values, and compared
//! with Rust's std functions evaluated in f64 (and rounded to f32 for single precision).
//! The error of one result is |got - want| / max(|want|, floor): a relative error, except
//! next to zeros of the function away from the origin, where it becomes an absolute error
//! scaled by 1/floor. NaN must match NaN, infinities and signed zeros must match exactly.
//! Run with `--nocapture` to see the measured maxima.

use cranelift_codegen::control::ControlPlane;
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::types::{F32, F32X4, F64, F64X2};
use cranelift_codegen::ir::{
    AbiParam, Function, InstBuilder, MemFlagsData, Signature, Type, UserFuncName, Value,
};
use cranelift_codegen::isa::{self, OwnedTargetIsa, TargetIsa};
use cranelift_codegen::settings::{self, Configurable};
use cranelift_codegen::Context;
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{default_libcall_names, Linkage, Module};
use nnc::codegen::math;
use std::f64::consts::{FRAC_1_SQRT_2, PI};
use std::time::Instant;

/// All lane types the emitters accept.
const LANE_TYPES: [Type; 4] = [F32, F32X4, F64, F64X2];
/// Required accuracy (see the module docs for the error measure).
const TOL_F32: f64 = 1e-6;
const TOL_F64: f64 = 1e-12;

type UnaryEmit = fn(&mut FunctionBuilder, Value) -> Value;
/// Emits a kernel's body from its loaded operands.
type KernelEmit<'a> = dyn Fn(&mut FunctionBuilder, &[Value]) -> Value + 'a;
/// A function's name, emitter and (input, expected output) pairs.
type SpecialCases<'a> = (&'static str, UnaryEmit, &'a [(f64, f64)]);

// ---- building and running kernels ------------------------------------------------------

fn host_isa() -> OwnedTargetIsa {
    let mut flags = settings::builder();
    flags.set("opt_level", "speed").unwrap();
    // Detects SSE4.1, AVX, FMA, ... on x86-64.
    let builder = cranelift_native::builder().expect("host ISA is supported");
    builder.finish(settings::Flags::new(flags)).unwrap()
}

fn aarch64_isa() -> OwnedTargetIsa {
    let mut flags = settings::builder();
    flags.set("opt_level", "speed").unwrap();
    isa::lookup_by_name("aarch64")
        .unwrap()
        .finish(settings::Flags::new(flags))
        .unwrap()
}

/// `fn(in_0, .., in_{arity-1}: *const T, out: *mut T, n: usize)` applying `emit` to
/// consecutive `ty`-sized chunks; n counts lanes and must be a multiple of the lane count.
fn build_kernel(isa: &dyn TargetIsa, ty: Type, arity: usize, emit: &KernelEmit<'_>) -> Function {
    let ptr = isa.pointer_type();
    let mut sig = Signature::new(isa.default_call_conv());
    sig.params
        .extend(std::iter::repeat_n(AbiParam::new(ptr), arity + 2));
    let mut func = Function::with_name_signature(UserFuncName::user(0, 0), sig);
    let mut fctx = FunctionBuilderContext::new();
    let mut b = FunctionBuilder::new(&mut func, &mut fctx);
    let entry = b.create_block();
    let header = b.create_block();
    let body = b.create_block();
    let exit = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.append_block_param(header, ptr);

    b.switch_to_block(entry);
    let params = b.block_params(entry).to_vec();
    let zero = b.ins().iconst(ptr, 0);
    b.ins().jump(header, &[zero.into()]);

    b.switch_to_block(header);
    let i = b.block_params(header)[0];
    let done = b
        .ins()
        .icmp(IntCC::UnsignedGreaterThanOrEqual, i, params[arity + 1]);
    b.ins().brif(done, exit, &[], body, &[]);

    b.switch_to_block(body);
    let lane_bytes = i64::from(ty.lane_type().bytes());
    let offset = b.ins().imul_imm_u(i, lane_bytes);
    let args: Vec<Value> = params[..arity]
        .iter()
        .map(|&base| {
            let addr = b.ins().iadd(base, offset);
            b.ins().load(ty, MemFlagsData::new(), addr, 0)
        })
        .collect();
    let result = emit(&mut b, &args);
    let out = b.ins().iadd(params[arity], offset);
    b.ins().store(MemFlagsData::new(), result, out, 0);
    let next = b.ins().iadd_imm_u(i, i64::from(ty.lane_count()));
    b.ins().jump(header, &[next.into()]);

    b.switch_to_block(exit);
    b.ins().return_(&[]);
    b.seal_all_blocks();
    b.finalize(isa.frontend_config());
    func
}

/// Compiles `func` for `isa` and checks that the machine code is self-contained: no
/// relocations means no calls into libm (or anything else).
fn assert_compiles_without_calls(isa: &dyn TargetIsa, func: &Function, what: &str) {
    let mut ctx = Context::for_function(func.clone());
    let code = ctx
        .compile(isa, &mut ControlPlane::default())
        .unwrap_or_else(|e| panic!("{what} does not compile for {}: {:?}", isa.name(), e.inner));
    let relocs = code.buffer.relocs();
    assert!(
        relocs.is_empty(),
        "{what} on {} needs relocations (external calls): {relocs:?}",
        isa.name()
    );
}

/// A JIT-compiled kernel and the module that owns its code.
struct Kernel {
    _module: JITModule,
    code: *const u8,
    ty: Type,
    arity: usize,
}

impl Kernel {
    fn new(ty: Type, arity: usize, emit: &KernelEmit<'_>) -> Self {
        let isa = host_isa();
        let func = build_kernel(&*isa, ty, arity, emit);
        assert_compiles_without_calls(&*isa, &func, &format!("{ty} kernel"));
        let mut module = JITModule::new(JITBuilder::with_isa(isa, default_libcall_names()));
        let id = module
            .declare_function("kernel", Linkage::Local, &func.signature)
            .unwrap();
        let mut ctx = module.make_context();
        ctx.func = func;
        module.define_function(id, &mut ctx).unwrap();
        module.finalize_definitions().unwrap();
        let code = module.get_finalized_function(id);
        Kernel {
            _module: module,
            code,
            ty,
            arity,
        }
    }

    fn unary(ty: Type, emit: UnaryEmit) -> Self {
        Self::new(ty, 1, &|b, args| emit(b, args[0]))
    }

    /// Runs the kernel over `inputs` (one slice per operand, equal lengths), converting to
    /// and from the lane type.
    fn run(&self, inputs: &[&[f64]]) -> Vec<f64> {
        assert_eq!(inputs.len(), self.arity);
        let n = inputs[0].len();
        let lanes = self.ty.lane_count() as usize;
        let padded = n.div_ceil(lanes) * lanes;
        if self.ty.lane_type() == F32 {
            let ins: Vec<Vec<f32>> = inputs
                .iter()
                .map(|v| {
                    let mut v: Vec<f32> = v.iter().map(|&x| x as f32).collect();
                    v.resize(padded, 0.0);
                    v
                })
                .collect();
            let mut out = vec![0f32; padded];
            self.call(
                ins.iter().map(|v| v.as_ptr().cast()),
                out.as_mut_ptr().cast(),
                padded,
            );
            out[..n].iter().map(|&x| f64::from(x)).collect()
        } else {
            let ins: Vec<Vec<f64>> = inputs
                .iter()
                .map(|v| {
                    let mut v = v.to_vec();
                    v.resize(padded, 0.0);
                    v
                })
                .collect();
            let mut out = vec![0f64; padded];
            self.call(
                ins.iter().map(|v| v.as_ptr().cast()),
                out.as_mut_ptr().cast(),
                padded,
            );
            out.truncate(n);
            out
        }
    }

    fn call(&self, ins: impl Iterator<Item = *const u8>, out: *mut u8, n: usize) {
        let ins: Vec<*const u8> = ins.collect();
        // SAFETY: the kernel was built with exactly this signature; every input buffer and
        // `out` hold `n` lanes of the kernel's lane type.
        unsafe {
            match ins[..] {
                [a] => {
                    let f: extern "C" fn(*const u8, *mut u8, usize) =
                        std::mem::transmute(self.code);
                    f(a, out, n)
                }
                [a, b] => {
                    let f: extern "C" fn(*const u8, *const u8, *mut u8, usize) =
                        std::mem::transmute(self.code);
                    f(a, b, out, n)
                }
                _ => unreachable!("kernels take one or two operands"),
            }
        }
    }
}

// ---- error measurement -----------------------------------------------------------------

/// Error of `got` against `want` as described in the module docs.
fn error(got: f64, want: f64, floor: f64) -> f64 {
    if want.is_nan() || got.is_nan() {
        return if want.is_nan() && got.is_nan() {
            0.0
        } else {
            f64::INFINITY
        };
    }
    if got == want {
        return if got.is_sign_negative() == want.is_sign_negative() {
            0.0
        } else {
            f64::INFINITY
        };
    }
    if want.is_infinite() || got.is_infinite() {
        return f64::INFINITY;
    }
    (got - want).abs() / want.abs().max(floor)
}

/// Worst error over a run, with the input that produced it.
#[derive(Default)]
struct Worst {
    error: f64,
    inputs: Vec<f64>,
    got: f64,
    want: f64,
}

impl Worst {
    fn record(&mut self, error: f64, inputs: &[f64], got: f64, want: f64) {
        if self.inputs.is_empty() || error > self.error {
            *self = Worst {
                error,
                inputs: inputs.to_vec(),
                got,
                want,
            };
        }
    }
}

fn is_single(ty: Type) -> bool {
    ty.lane_type() == F32
}

/// The reference value as the lane type represents it.
fn round_to_lane(ty: Type, v: f64) -> f64 {
    if is_single(ty) {
        f64::from(v as f32)
    } else {
        v
    }
}

fn tolerance(ty: Type) -> f64 {
    if is_single(ty) {
        TOL_F32
    } else {
        TOL_F64
    }
}

// ---- reference functions ---------------------------------------------------------------

/// C99 libm (always linked into Rust programs) for the functions std lacks or gets wrong:
/// std has no erf, its asinh and acosh overflow for huge arguments and its atanh loses
/// accuracy next to -1.
mod libm {
    extern "C" {
        pub fn erf(x: f64) -> f64;
        pub fn erfc(x: f64) -> f64;
        pub fn asinh(x: f64) -> f64;
        pub fn acosh(x: f64) -> f64;
        pub fn atanh(x: f64) -> f64;
    }
}

fn erf_ref(x: f64) -> f64 {
    // SAFETY: a pure C math function.
    unsafe { libm::erf(x) }
}

fn asinh_ref(x: f64) -> f64 {
    // SAFETY: a pure C math function.
    unsafe { libm::asinh(x) }
}

fn acosh_ref(x: f64) -> f64 {
    // SAFETY: a pure C math function.
    unsafe { libm::acosh(x) }
}

fn atanh_ref(x: f64) -> f64 {
    // SAFETY: a pure C math function.
    unsafe { libm::atanh(x) }
}

/// x·Φ(x) with Φ(x) = erfc(-x/√2)/2, exact in the negative tail.
fn gelu_erf_ref(x: f64) -> f64 {
    // SAFETY: a pure C math function.
    x * 0.5 * unsafe { libm::erfc(-x * FRAC_1_SQRT_2) }
}

/// 0.5x(1 + tanh(u)) written as x / (1 + e^(-2u)) to stay exact in the negative tail.
fn gelu_tanh_ref(x: f64) -> f64 {
    let u = (2.0 / PI).sqrt() * (x + 0.044715 * x * x * x);
    x / (1.0 + (-2.0 * u).exp())
}

/// 1/(1 + e^-x), as e^x/(1 + e^x) for negative x so that e^-x cannot overflow.
fn sigmoid_ref(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        x.exp() / (1.0 + x.exp())
    }
}

fn softplus_ref(x: f64) -> f64 {
    x.max(0.0) + (-x.abs()).exp().ln_1p()
}

// ---- inputs ----------------------------------------------------------------------------

/// Dense grids plus special values for one-argument functions.
fn unary_inputs(ty: Type) -> Vec<f64> {
    let single = is_single(ty);
    let mut v = Vec::new();
    // Uniform grid on [-100, 100] and a finer one on [-1, 1].
    v.extend((-100_000..=100_000).map(|i| f64::from(i) * 1e-3));
    v.extend((-50_000..=50_000).map(|i| f64::from(i) * 2e-5));
    // Log-spaced magnitudes over the whole finite range, both signs (denormals included).
    let (lo, hi, step) = if single {
        (-45.0, 38.5, 1e-3)
    } else {
        (-323.0, 308.2, 5e-3)
    };
    let mut e = lo;
    while e < hi {
        let m = 10f64.powf(e);
        v.push(m);
        v.push(-m);
        e += step;
    }
    // Next to 1 and -1 (log, acosh, atanh, asin, acos).
    for k in 1..=if single { 24 } else { 53 } {
        let d = 2f64.powi(-k);
        v.extend([1.0 + d, 1.0 - d, -1.0 + d, -1.0 - d]);
    }
    // Multiples of π/2 (zeros and poles of the trig functions).
    v.extend((-200..=200).map(|k| f64::from(k) * PI / 2.0));
    // Around the overflow and underflow thresholds of exp, sinh and cosh.
    let thresholds: &[f64] = if single {
        &[88.72, 89.41, -87.34, -103.97]
    } else {
        &[709.78, 710.48, -708.4, -745.13]
    };
    for &t in thresholds {
        v.extend((-10_000..=10_000).map(|i| t + f64::from(i) * 1e-4));
    }
    let (min_normal, max, min_denormal) = if single {
        (f64::from(f32::MIN_POSITIVE), f64::from(f32::MAX), 1e-45)
    } else {
        (f64::MIN_POSITIVE, f64::MAX, 5e-324)
    };
    for s in [
        0.0,
        1.0,
        0.5,
        2.0,
        min_normal,
        max,
        min_denormal,
        f64::INFINITY,
    ] {
        v.extend([s, -s]);
    }
    v.push(f64::NAN);
    if single {
        for x in &mut v {
            *x = f64::from(*x as f32);
        }
    }
    v
}

// ---- unary accuracy tests ----------------------------------------------------------------

struct UnaryCase {
    name: &'static str,
    emit: UnaryEmit,
    reference: fn(f64) -> f64,
    /// Results with |want| below this are judged by absolute error (times 1/floor).
    floor: f64,
    /// Inputs with a larger magnitude are not checked (the trig functions give up there).
    max_arg_single: f64,
    max_arg_double: f64,
    /// Also accept the result if its reciprocal is accurate: next to a pole of tan, where
    /// the result is the reciprocal of a value near zero, 1/tan gets the absolute-error
    /// treatment every other function gets next to its zeros.
    reciprocal_near_poles: bool,
}

impl UnaryCase {
    fn new(name: &'static str, emit: UnaryEmit, reference: fn(f64) -> f64) -> Self {
        UnaryCase {
            name,
            emit,
            reference,
            floor: 0.0,
            max_arg_single: f64::INFINITY,
            max_arg_double: f64::INFINITY,
            reciprocal_near_poles: false,
        }
    }

    fn reciprocal_near_poles(self) -> Self {
        UnaryCase {
            reciprocal_near_poles: true,
            ..self
        }
    }

    fn floor(self, floor: f64) -> Self {
        UnaryCase { floor, ..self }
    }

    fn max_arg(self, single: f64, double: f64) -> Self {
        UnaryCase {
            max_arg_single: single,
            max_arg_double: double,
            ..self
        }
    }

    /// Runs every lane type, prints the worst errors and panics if one exceeds the
    /// tolerance.
    fn check(&self) {
        let mut failures = Vec::new();
        for ty in LANE_TYPES {
            let kernel = Kernel::unary(ty, self.emit);
            let inputs = unary_inputs(ty);
            let max_arg = if is_single(ty) {
                self.max_arg_single
            } else {
                self.max_arg_double
            };
            let min_floor = if is_single(ty) {
                f64::from(f32::MIN_POSITIVE)
            } else {
                f64::MIN_POSITIVE
            };
            let outputs = kernel.run(&[&inputs]);
            let mut worst = Worst::default();
            for (&x, &got) in inputs.iter().zip(&outputs) {
                if x.is_finite() && x.abs() > max_arg {
                    continue;
                }
                let want = round_to_lane(ty, (self.reference)(x));
                let floor = self.floor.max(min_floor);
                let mut err = error(got, want, floor);
                if self.reciprocal_near_poles {
                    err = err.min(error(1.0 / got, 1.0 / want, floor));
                }
                worst.record(err, &[x], got, want);
            }
            println!(
                "{:<16} {:<6} max error {:.3e} at x = {:e} (got {:e}, want {:e})",
                self.name, ty, worst.error, worst.inputs[0], worst.got, worst.want
            );
            if worst.error > tolerance(ty) {
                failures.push(format!(
                    "{ty}: {:e} at x = {:e}",
                    worst.error, worst.inputs[0]
                ));
            }
        }
        assert!(
            failures.is_empty(),
            "{} exceeds tolerance: {failures:?}",
            self.name
        );
    }
}

macro_rules! unary_accuracy_tests {
    ($($name:ident: $case:expr;)*) => {$(
        #[test]
        fn $name() {
            $case.check();
        }
    )*};
}

/// sin, cos and tan are checked up to where the single precision reduction is exact
/// (|x| < 2^16·π/2) and up to Cephes' limit 2^30 for double precision.
const TRIG_MAX_SINGLE: f64 = 1e5;
const TRIG_MAX_DOUBLE: f64 = 1e9;

unary_accuracy_tests! {
    exp: UnaryCase::new("exp", math::exp, f64::exp);
    log: UnaryCase::new("log", math::log, f64::ln);
    tanh: UnaryCase::new("tanh", math::tanh, f64::tanh);
    sigmoid: UnaryCase::new("sigmoid", math::sigmoid, sigmoid_ref);
    erf: UnaryCase::new("erf", math::erf, erf_ref);
    gelu_erf: UnaryCase::new("gelu_erf", math::gelu_erf, gelu_erf_ref).floor(0.1);
    gelu_tanh: UnaryCase::new("gelu_tanh", math::gelu_tanh, gelu_tanh_ref).floor(0.1);
    softplus: UnaryCase::new("softplus", math::softplus, softplus_ref);
    sin: UnaryCase::new("sin", math::sin, f64::sin)
        .floor(0.1)
        .max_arg(TRIG_MAX_SINGLE, TRIG_MAX_DOUBLE);
    cos: UnaryCase::new("cos", math::cos, f64::cos)
        .floor(0.1)
        .max_arg(TRIG_MAX_SINGLE, TRIG_MAX_DOUBLE);
    tan: UnaryCase::new("tan", math::tan, f64::tan)
        .floor(0.1)
        .reciprocal_near_poles()
        .max_arg(TRIG_MAX_SINGLE, TRIG_MAX_DOUBLE);
    atan: UnaryCase::new("atan", math::atan, f64::atan);
    asin: UnaryCase::new("asin", math::asin, f64::asin);
    acos: UnaryCase::new("acos", math::acos, f64::acos);
    sinh: UnaryCase::new("sinh", math::sinh, f64::sinh);
    cosh: UnaryCase::new("cosh", math::cosh, f64::cosh);
    asinh: UnaryCase::new("asinh", math::asinh, asinh_ref);
    acosh: UnaryCase::new("acosh", math::acosh, acosh_ref);
    atanh: UnaryCase::new("atanh", math::atanh, atanh_ref);
    round_half_even: UnaryCase::new("round_half_even", math::round_half_even, f64::round_ties_even);
}

/// The IEEE special cases the task lists, spelled out (they are also covered by the
/// grids above, which compare NaN, infinities and signed zeros exactly).
#[test]
fn special_values() {
    let inf = f64::INFINITY;
    let nan = f64::NAN;
    let table: &[SpecialCases<'_>] = &[
        (
            "exp",
            math::exp,
            &[
                (-inf, 0.0),
                (inf, inf),
                (1000.0, inf),
                (-1000.0, 0.0),
                (nan, nan),
                (0.0, 1.0),
            ],
        ),
        (
            "log",
            math::log,
            &[
                (0.0, -inf),
                (-0.0, -inf),
                (-1.0, nan),
                (-inf, nan),
                (inf, inf),
                (nan, nan),
                (1.0, 0.0),
            ],
        ),
        (
            "tanh",
            math::tanh,
            &[
                (50.0, 1.0),
                (-50.0, -1.0),
                (inf, 1.0),
                (-inf, -1.0),
                (nan, nan),
                (-0.0, -0.0),
            ],
        ),
        (
            "sigmoid",
            math::sigmoid,
            &[(inf, 1.0), (-inf, 0.0), (nan, nan), (0.0, 0.5)],
        ),
        (
            "erf",
            math::erf,
            &[(inf, 1.0), (-inf, -1.0), (nan, nan), (-0.0, -0.0)],
        ),
        (
            "softplus",
            math::softplus,
            &[(inf, inf), (-inf, 0.0), (nan, nan)],
        ),
        (
            "sin",
            math::sin,
            &[(inf, nan), (-inf, nan), (nan, nan), (-0.0, -0.0)],
        ),
        ("cos", math::cos, &[(inf, nan), (nan, nan), (0.0, 1.0)]),
        (
            "atanh",
            math::atanh,
            &[(1.0, inf), (-1.0, -inf), (2.0, nan)],
        ),
        ("acosh", math::acosh, &[(1.0, 0.0), (0.5, nan), (inf, inf)]),
        ("asin", math::asin, &[(2.0, nan), (-0.0, -0.0)]),
    ];
    for &(name, emit, cases) in table {
        for ty in LANE_TYPES {
            let kernel = Kernel::unary(ty, emit);
            let xs: Vec<f64> = cases.iter().map(|c| c.0).collect();
            let got = kernel.run(&[&xs]);
            for (&(x, want), &got) in cases.iter().zip(&got) {
                assert_eq!(
                    error(got, want, 1.0),
                    0.0,
                    "{name}({x}) on {ty}: got {got}, want {want}"
                );
            }
        }
    }
    // sigmoid(-100) is a denormal (or 0) in single precision, never NaN.
    for ty in LANE_TYPES {
        let got = Kernel::unary(ty, math::sigmoid).run(&[&[-100.0]])[0];
        assert!((0.0..1e-43).contains(&got), "sigmoid(-100) on {ty} = {got}");
    }
}

// ---- pow ---------------------------------------------------------------------------------

#[test]
fn pow_accuracy_and_special_cases() {
    let inf = f64::INFINITY;
    let mut xs = vec![
        0.0,
        -0.0,
        inf,
        -inf,
        f64::NAN,
        1.0,
        -1.0,
        0.5,
        -0.5,
        2.0,
        -2.0,
        10.0,
        -10.0,
    ];
    let mut e = -3.0;
    while e <= 3.0 {
        xs.push(10f64.powf(e));
        xs.push(-(10f64.powf(e)));
        e += 0.025;
    }
    xs.extend([1e-30, -1e-30, 1e30, -1e30, 1e-40, 1.0 + 1e-7, 1.0 - 1e-7]);
    let mut ys = vec![
        0.0,
        -0.0,
        inf,
        -inf,
        f64::NAN,
        1.0,
        -1.0,
        2.0,
        -2.0,
        3.0,
        -3.0,
        0.5,
        -0.5,
        1.0 / 3.0,
    ];
    ys.extend((-400..=400).map(|i| f64::from(i) * 0.05));
    ys.extend((-30..=30).map(f64::from));
    // Huge integers: 2^52 + 1 is odd, 2^53 + 2 and 2^60 are even (double only).
    ys.extend([
        4503599627370497.0,
        -4503599627370497.0,
        9007199254740994.0,
        2f64.powi(60),
    ]);

    let mut failures = Vec::new();
    for ty in LANE_TYPES {
        let (mut px, mut py) = (Vec::new(), Vec::new());
        for &x in &xs {
            for &y in &ys {
                let (x, y) = (round_to_lane(ty, x), round_to_lane(ty, y));
                px.push(x);
                py.push(y);
            }
        }
        let kernel = Kernel::new(ty, 2, &|b, a| math::pow(b, a[0], a[1]));
        let got = kernel.run(&[&px, &py]);
        let min_floor = if is_single(ty) {
            f64::from(f32::MIN_POSITIVE)
        } else {
            f64::MIN_POSITIVE
        };
        let mut worst = Worst::default();
        for ((&x, &y), &g) in px.iter().zip(&py).zip(&got) {
            let want = round_to_lane(ty, x.powf(y));
            worst.record(error(g, want, min_floor), &[x, y], g, want);
        }
        println!(
            "{:<16} {:<6} max error {:.3e} at (x, y) = ({:e}, {:e}) (got {:e}, want {:e})",
            "pow", ty, worst.error, worst.inputs[0], worst.inputs[1], worst.got, worst.want
        );
        if worst.error > tolerance(ty) {
            failures.push(format!("{ty}: {:e} at {:?}", worst.error, worst.inputs));
        }
    }
    assert!(failures.is_empty(), "pow exceeds tolerance: {failures:?}");
}

// ---- lowering and throughput ---------------------------------------------------------------

/// Every emitter with its number of operands, for building kernels without running them.
fn all_emitters() -> Vec<(&'static str, usize, Box<KernelEmit<'static>>)> {
    let unary: [(&str, UnaryEmit); 20] = [
        ("exp", math::exp),
        ("log", math::log),
        ("tanh", math::tanh),
        ("sigmoid", math::sigmoid),
        ("erf", math::erf),
        ("gelu_erf", math::gelu_erf),
        ("gelu_tanh", math::gelu_tanh),
        ("softplus", math::softplus),
        ("sin", math::sin),
        ("cos", math::cos),
        ("tan", math::tan),
        ("atan", math::atan),
        ("asin", math::asin),
        ("acos", math::acos),
        ("sinh", math::sinh),
        ("cosh", math::cosh),
        ("asinh", math::asinh),
        ("acosh", math::acosh),
        ("atanh", math::atanh),
        ("round_half_even", math::round_half_even),
    ];
    let mut all: Vec<(&str, usize, Box<KernelEmit<'static>>)> = unary
        .into_iter()
        .map(|(name, emit)| {
            let body: Box<KernelEmit<'static>> = Box::new(move |b, a| emit(b, a[0]));
            (name, 1, body)
        })
        .collect();
    all.push(("pow", 2, Box::new(|b, a| math::pow(b, a[0], a[1]))));
    all
}

/// aarch64 is a cross-compilation target: check that everything lowers there, without calls.
#[test]
fn lowers_for_aarch64() {
    let isa = aarch64_isa();
    for (name, arity, emit) in all_emitters() {
        for ty in LANE_TYPES {
            let func = build_kernel(&*isa, ty, arity, &*emit);
            assert_compiles_without_calls(&*isa, &func, &format!("{name} on {ty}"));
        }
    }
}

/// A std single precision function, for scale in the throughput test.
type StdF32 = fn(f32) -> f32;

/// Informational: ns per element of exp and tanh kernels, next to the host's libm expf and
/// tanhf called from a Rust loop for scale.
#[test]
fn throughput() {
    let n: u32 = 1 << 20;
    let reps: u32 = 20;
    let xs: Vec<f64> = (0..n)
        .map(|i| f64::from(i) / f64::from(n) * 20.0 - 10.0)
        .collect();
    let xs32: Vec<f32> = xs.iter().map(|&x| x as f32).collect();
    let per_element =
        |elapsed: std::time::Duration| elapsed.as_nanos() as f64 / f64::from(reps) / f64::from(n);
    let cases: [(&str, UnaryEmit, StdF32); 2] = [
        ("exp", math::exp, f32::exp),
        ("tanh", math::tanh, f32::tanh),
    ];
    for (name, emit, std_fn) in cases {
        for ty in [F32X4, F32, F64] {
            let kernel = Kernel::unary(ty, emit);
            let input = if is_single(ty) {
                xs32.as_ptr().cast::<u8>()
            } else {
                xs.as_ptr().cast::<u8>()
            };
            let mut out = vec![0f64; n as usize];
            let output = out.as_mut_ptr().cast::<u8>();
            let run = || kernel.call(std::iter::once(input), output, n as usize);
            run();
            let start = Instant::now();
            for _ in 0..reps {
                run();
            }
            println!(
                "{name:<5} {ty:<6} {:6.2} ns/element",
                per_element(start.elapsed())
            );
        }
        let mut out = vec![0f32; n as usize];
        let start = Instant::now();
        for _ in 0..reps {
            for (o, &x) in out.iter_mut().zip(&xs32) {
                *o = std_fn(x);
            }
            std::hint::black_box(&mut out);
        }
        println!(
            "{name:<5} std    {:6.2} ns/element (Rust f32::{name})",
            per_element(start.elapsed())
        );
    }
}
