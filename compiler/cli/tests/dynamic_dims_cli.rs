//! `--dim NAME=MIN..MAX` and ranges in `--input-shape` on the command line: parsing,
//! refusals, and `nnc run` / `nnc verify` on inputs of any batch in range, checked
//! against onnx.reference's output for the examples' batch model.

#[path = "../../tests/common/models.rs"]
mod models;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use nnc::ir::Tensor;

fn nnc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nnc"))
        .args(args)
        .output()
        .expect("nnc runs")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn examples_c() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/c")
}

/// The three images of examples/c/make_batch_model.py: the ramp, its reverse, 0.5.
fn three_images() -> Tensor {
    let ramp: Vec<f32> = (0..64).map(|i| i as f32 / 64.0).collect();
    let mut v = ramp.clone();
    v.extend(ramp.iter().rev());
    v.extend([0.5f32; 64]);
    Tensor::from_vec(&[3, 1, 8, 8], v)
}

#[test]
fn run_takes_any_batch_in_range_from_one_compile() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images.npy");
    std::fs::write(&images, nnc_host::npy::to_bytes(&three_images()).unwrap()).unwrap();
    let out = dir.path().join("out");
    let model = examples_c().join("batch_model.onnx");
    let o = nnc(&[
        "run",
        model.to_str().unwrap(),
        "--dim",
        "N=1..4",
        "--input",
        &format!("image={}", images.display()),
        "--output",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let probs = nnc_host::npy::read(&out.join("probs.npy")).unwrap();
    assert_eq!(probs.shape(), &[3, 4]);
    let expected: Vec<f64> = std::fs::read_to_string(examples_c().join("expected_batch.txt"))
        .unwrap()
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect();
    for (a, e) in probs.to_f64_vec().iter().zip(&expected) {
        assert!((a - e).abs() < 1e-5, "{a} vs {e}");
    }
    // Five images are outside 1..4.
    let five = Tensor::from_vec(&[5, 1, 8, 8], vec![0.5f32; 5 * 64]);
    std::fs::write(&images, nnc_host::npy::to_bytes(&five).unwrap()).unwrap();
    let o = nnc(&[
        "run",
        model.to_str().unwrap(),
        "--dim",
        "N=1..4",
        "--input",
        &format!("image={}", images.display()),
        "--output",
        out.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(
        text(&o).contains("input 'image' must be float32[N,1,8,8] with N in 1..4"),
        "{}",
        text(&o)
    );
}

#[test]
fn verify_checks_a_batch_against_the_interpreter() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images.npy");
    std::fs::write(&images, nnc_host::npy::to_bytes(&three_images()).unwrap()).unwrap();
    let model = examples_c().join("batch_model.onnx");
    let o = nnc(&[
        "verify",
        model.to_str().unwrap(),
        "--dim",
        "N=1..4",
        "--input",
        &format!("image={}", images.display()),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("PASS probs"), "{}", text(&o));
}

#[test]
fn compile_writes_one_library_and_a_header_with_the_dim() {
    let dir = tempfile::tempdir().unwrap();
    let lib = dir.path().join("libbatch.so");
    let model = examples_c().join("batch_model.onnx");
    let o = nnc(&[
        "compile",
        model.to_str().unwrap(),
        "--dim",
        "N=2..6",
        "-o",
        lib.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let header = std::fs::read_to_string(lib.with_extension("h")).unwrap();
    assert!(header.contains("#define NNC_MODEL_NUM_DIMS 1"), "{header}");
    assert!(header.contains("#define NNC_MODEL_DIM_0_MIN 2"), "{header}");
    assert!(header.contains("#define NNC_MODEL_DIM_0_MAX 6"), "{header}");
    // Sizes in the header are those of the maximum batch.
    assert!(
        header.contains("#define NNC_MODEL_INPUT_0_NUMEL 384"),
        "{header}"
    );
    assert!(header.contains("[N <= 6, 1, 8, 8]"), "{header}");
    assert!(header.contains("int32_t shapes(const int64_t *dims, int64_t *shapes);"));
}

#[test]
fn malformed_and_impossible_ranges_are_one_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let lib = dir.path().join("lib.so");
    let batch = examples_c().join("batch_model.onnx");
    let fixed = examples_c().join("model.onnx");
    for (model, flag, value, needle) in [
        (&batch, "--dim", "N=0..4", "a range starts at 1"),
        (&batch, "--dim", "N=5..2", "MIN is larger than MAX"),
        (
            &batch,
            "--dim",
            "N=1..x",
            "MIN..MAX with non-negative integers",
        ),
        (&batch, "--dim", "M=1..4", "'M'"),
        // model.onnx fixes its batch at 1.
        (
            &fixed,
            "--input-shape",
            "image=1..4,1,8,8",
            "the model fixes 1",
        ),
    ] {
        let o = nnc(&[
            "compile",
            model.to_str().unwrap(),
            flag,
            value,
            "-o",
            lib.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(1), "{value}: {}", text(&o));
        let t = text(&o);
        assert!(t.contains(needle), "{value}: '{needle}' missing from {t}");
        assert!(!t.contains("panicked"), "{t}");
        assert!(!lib.exists(), "{value}: a library was written");
    }
}

#[test]
fn int8_calibrates_one_sample_at_a_time_and_runs_any_batch() {
    use nnc_runtime_abi::loader::{Library, Tensor as In, TensorMut as Out};
    let dir = tempfile::tempdir().unwrap();
    let calib = dir.path().join("calib");
    std::fs::create_dir(&calib).unwrap();
    // Four calibration samples in one file: the library is compiled for one sample,
    // so calibration sees them one at a time.
    let mut v = three_images().to_f64_vec();
    v.extend((0..64).map(|i| ((i * 7) % 64) as f64 / 64.0));
    let samples = Tensor::from_vec(&[4, 1, 8, 8], v.iter().map(|&x| x as f32).collect());
    std::fs::write(
        calib.join("image.npy"),
        nnc_host::npy::to_bytes(&samples).unwrap(),
    )
    .unwrap();
    let lib = dir.path().join("libq.so");
    let model = examples_c().join("batch_model.onnx");
    let o = nnc(&[
        "compile",
        model.to_str().unwrap(),
        "--dim",
        "N=1..4",
        "--quantize",
        "int8",
        "--calibration",
        calib.to_str().unwrap(),
        "-o",
        lib.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let library = Library::open(&lib, None).unwrap();
    assert_eq!(library.dims()[0].name, "N");
    let images = three_images().to_f64_vec();
    let images: Vec<f32> = images.iter().map(|&x| x as f32).collect();
    let mut probs = [0f32; 12];
    let pool = nnc_runtime_abi::ThreadPool::new(2).unwrap();
    let mut ws = library.workspace_for(&pool);
    library
        .run_dims(
            Some(&pool),
            &mut ws,
            &[3],
            &[In::from(&images[..])],
            &mut [Out::from(&mut probs[..])],
        )
        .unwrap();
    let expected: Vec<f32> = std::fs::read_to_string(examples_c().join("expected_batch.txt"))
        .unwrap()
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect();
    for (a, e) in probs.iter().zip(&expected) {
        assert!((a - e).abs() < 0.02, "int8 {a} vs float {e}");
    }
    // The first image alone gives the same bits as the first row of the batch.
    let mut one = [0f32; 4];
    library
        .run_dims(
            None,
            &mut ws,
            &[1],
            &[In::from(&images[..64])],
            &mut [Out::from(&mut one[..])],
        )
        .unwrap();
    assert_eq!(one[..], probs[..4]);
    // A buffer sized for another batch is refused before the call.
    assert!(library
        .run_dims(
            None,
            &mut ws,
            &[2],
            &[In::from(&images[..])],
            &mut [Out::from(&mut probs[..])],
        )
        .is_err());
}

/// A conv net over `[1, 2, size, size]` images (`size` an ONNX dim_param on both plane
/// axes): a padded conv with ReLU, a strided max pool, global pooling, a classifier.
fn image_model() -> Vec<u8> {
    image_model_over(&[(2, "size"), (3, "size")])
}

/// [`image_model`] with the given axes of the image named dims instead.
fn image_model_over(named: &[(usize, &str)]) -> Vec<u8> {
    use models::{Attr, ModelBuilder};
    use nnc::onnx::proto::{tensor_shape_proto, type_proto};
    let mut m = ModelBuilder::new(5);
    let x = m.input("image", &[1, 2, 16, 16]);
    let vi = m.graph.input.iter_mut().find(|i| i.name == x).unwrap();
    let Some(type_proto::Value::TensorType(t)) = vi.r#type.as_mut().unwrap().value.as_mut() else {
        unreachable!()
    };
    for &(axis, name) in named {
        t.shape.as_mut().unwrap().dim[axis].value =
            Some(tensor_shape_proto::dimension::Value::DimParam(name.into()));
    }
    let w = m.weight(&[4, 2, 3, 3], 0.5);
    let y = m.node("Conv", &[&x, &w], vec![("pads", Attr::Ints(vec![1; 4]))]);
    let y = m.node("Relu", &[&y], vec![]);
    let y = m.node(
        "MaxPool",
        &[&y],
        vec![
            ("kernel_shape", Attr::Ints(vec![2, 2])),
            ("strides", Attr::Ints(vec![2, 2])),
        ],
    );
    let y = m.node("GlobalAveragePool", &[&y], vec![]);
    let y = m.node("Flatten", &[&y], vec![("axis", Attr::I(1))]);
    let wc = m.weight(&[3, 4], 0.5);
    let y = m.node("Gemm", &[&y, &wc], vec![("transB", Attr::I(1))]);
    m.output(&y);
    m.encode()
}

/// `nnc verify` of an image size dim on an image smaller than the bound: the reference
/// is the model imported at the image's size.
#[test]
fn verify_checks_an_image_of_any_size_in_range() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("image.onnx");
    std::fs::write(&model, image_model()).unwrap();
    let v: Vec<f32> = (0..2 * 13 * 13)
        .map(|i| ((i * 7) % 11) as f32 / 11.0)
        .collect();
    let image = Tensor::from_vec(&[1, 2, 13, 13], v);
    let path = dir.path().join("image.npy");
    std::fs::write(&path, nnc_host::npy::to_bytes(&image).unwrap()).unwrap();
    let o = nnc(&[
        "verify",
        model.to_str().unwrap(),
        "--dim",
        "size=4..24",
        "--input",
        &format!("image={}", path.display()),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("PASS"), "{}", text(&o));
}

/// `nnc verify` and `nnc run` with three dims (batch, height and width, which only the
/// compile over symbolic shapes takes): the library `nnc compile` would build, run at
/// the image's values, against the model imported at them and onnxruntime.
#[test]
fn verify_and_run_take_batch_height_and_width() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("image.onnx");
    std::fs::write(&model, image_model_over(&[(0, "n"), (2, "h"), (3, "w")])).unwrap();
    let v: Vec<f32> = (0..2 * 2 * 13 * 9)
        .map(|i| ((i * 7) % 11) as f32 / 11.0)
        .collect();
    let image = Tensor::from_vec(&[2, 2, 13, 9], v);
    let path = dir.path().join("image.npy");
    std::fs::write(&path, nnc_host::npy::to_bytes(&image).unwrap()).unwrap();
    let dims = ["--dim", "n=1..4", "--dim", "h=4..24", "--dim", "w=4..24"];
    let input = format!("image={}", path.display());
    let mut args = vec!["verify", model.to_str().unwrap(), "--input", &input];
    args.extend(dims);
    let o = nnc(&args);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("PASS"), "{}", text(&o));
    assert!(!text(&o).contains("FAIL"), "{}", text(&o));
    let out = dir.path().join("out");
    let mut args = vec!["run", model.to_str().unwrap(), "--input", &input];
    args.extend(["--output", out.to_str().unwrap()]);
    args.extend(dims);
    let o = nnc(&args);
    assert!(o.status.success(), "{}", text(&o));
    let y = nnc_host::npy::read(
        &out.join(
            std::fs::read_dir(&out)
                .unwrap()
                .next()
                .unwrap()
                .unwrap()
                .file_name(),
        ),
    )
    .unwrap();
    assert_eq!(y.shape(), &[2, 3]);
}

/// `MIN..MIN` is the value MIN, whether by `--dim` or an `--input-shape` axis (it was
/// refused as "imported differently at different values"); a name given twice is an
/// error saying so.
#[test]
fn a_range_of_one_value_is_that_value_and_a_name_given_twice_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("image.onnx");
    std::fs::write(&model, image_model()).unwrap();
    let header_of = |flags: &[&str]| {
        let lib = dir.path().join("libimg.so");
        let mut args = vec![
            "compile",
            model.to_str().unwrap(),
            "-o",
            lib.to_str().unwrap(),
        ];
        args.extend(flags);
        let o = nnc(&args);
        assert!(o.status.success(), "{flags:?}: {}", text(&o));
        std::fs::read_to_string(lib.with_extension("h")).unwrap()
    };
    let fixed = header_of(&["--dim", "size=5"]);
    assert_eq!(header_of(&["--dim", "size=5..5"]), fixed);
    assert_eq!(header_of(&["--dim", "size=5..=5"]), fixed);
    assert_eq!(header_of(&["--input-shape", "image=1,2,5..5,5"]), fixed);
    for (flags, needles) in [
        (
            vec!["--dim", "size=1..2", "--dim", "size=3..4"],
            vec!["--dim size was given twice", "size=1..2", "size=3..4"],
        ),
        (
            vec!["--dim", "size=8", "--dim", "size=8"],
            vec!["--dim size was given twice"],
        ),
        (
            vec![
                "--input-shape",
                "image=1,2,8,8",
                "--input-shape",
                "image=1,2,9,9",
            ],
            vec!["--input-shape image was given twice"],
        ),
    ] {
        let mut args = vec!["compile", model.to_str().unwrap(), "-o"];
        let lib = dir.path().join("librefused.so");
        args.push(lib.to_str().unwrap());
        args.extend(&flags);
        let o = nnc(&args);
        assert_eq!(o.status.code(), Some(1), "{flags:?}: {}", text(&o));
        for n in needles {
            assert!(
                text(&o).contains(n),
                "{flags:?}: '{n}' missing: {}",
                text(&o)
            );
        }
        assert!(!lib.exists());
    }
}
