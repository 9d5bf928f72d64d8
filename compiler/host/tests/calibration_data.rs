//! Calibration data layouts (`nnc_host::calibration_data`): every accepted form gives
//! the same samples, in order, for the same arrays; and every mistake is one error that
//! names the file and the input.

use std::io::Write;
use std::path::Path;

use nnc::ir::{DType, Tensor, TensorType};
use nnc_host::calibration_data::{load, InputSpec};

fn spec(name: &str, dtype: DType, shape: &[usize]) -> InputSpec {
    InputSpec {
        name: name.into(),
        ty: TensorType::new(dtype, shape.to_vec()),
    }
}

/// `n` samples of `shape` with distinct values (sample i, element j: i·1000 + j).
fn stacked(n: usize, shape: &[usize], offset: f32) -> Tensor {
    let per: usize = shape.iter().product();
    let values: Vec<f32> = (0..n * per)
        .map(|k| offset + (k / per * 1000 + k % per) as f32)
        .collect();
    let mut full = vec![n * shape[0]];
    full.extend_from_slice(&shape[1..]);
    Tensor::from_vec(&full, values)
}

fn write_npy(path: &Path, t: &Tensor) {
    std::fs::write(path, nnc_host::npy::to_bytes(t).unwrap()).unwrap();
}

fn write_npz(path: &Path, arrays: &[(&str, &Tensor)], deflate: bool) {
    let mut z = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
    let method = if deflate {
        zip::CompressionMethod::Deflated
    } else {
        zip::CompressionMethod::Stored
    };
    for (name, t) in arrays {
        let options = zip::write::SimpleFileOptions::default().compression_method(method);
        z.start_file(format!("{name}.npy"), options).unwrap();
        z.write_all(&nnc_host::npy::to_bytes(t).unwrap()).unwrap();
    }
    z.finish().unwrap();
}

fn write_pb(path: &Path, t: &Tensor) {
    let proto = nnc::onnx::proto::TensorProto {
        dims: t.shape().iter().map(|&d| d as i64).collect(),
        data_type: 1,
        raw_data: t.to_le_bytes(),
        ..Default::default()
    };
    std::fs::write(path, prost::Message::encode_to_vec(&proto)).unwrap();
}

/// Sample `i` of an input made by `stacked(.., offset)`.
fn sample(i: usize, shape: &[usize], offset: f32) -> Tensor {
    let per: usize = shape.iter().product();
    let values: Vec<f32> = (0..per).map(|j| offset + (i * 1000 + j) as f32).collect();
    Tensor::from_vec(shape, values)
}

#[test]
fn every_layout_gives_the_same_samples() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (img, mask) = ([1, 2, 3], [1, 4]);
    let inputs = [
        spec("image", DType::F32, &img),
        spec("mask", DType::F32, &mask),
    ];
    let expected: Vec<Vec<Tensor>> = (0..5)
        .map(|i| vec![sample(i, &img, 0.0), sample(i, &mask, 0.5)])
        .collect();

    // A folder of NAME.npy, one stacked along the batch axis, one on a new axis.
    let npy = d.join("npy");
    std::fs::create_dir(&npy).unwrap();
    write_npy(&npy.join("image.npy"), &stacked(5, &img, 0.0));
    write_npy(
        &npy.join("mask.npy"),
        &stacked(5, &mask, 0.5).reshape(&[5, 1, 4]),
    );
    assert_eq!(load(&npy, &inputs).unwrap(), expected, "NAME.npy folder");

    // .npz files in name order (2 + 3 samples), stored and deflated.
    let npz = d.join("npz");
    std::fs::create_dir(&npz).unwrap();
    let (a_img, a_mask) = (stacked(5, &img, 0.0), stacked(5, &mask, 0.5));
    let split = |t: &Tensor, from: usize, to: usize, shape: &[usize]| {
        let per: usize = shape.iter().product();
        let Tensor::F32(v) = t else { unreachable!() };
        let v: Vec<f32> = v
            .iter()
            .copied()
            .skip(from * per)
            .take((to - from) * per)
            .collect();
        let mut s = vec![(to - from) * shape[0]];
        s.extend_from_slice(&shape[1..]);
        Tensor::from_vec(&s, v)
    };
    write_npz(
        &npz.join("a.npz"),
        &[
            ("image", &split(&a_img, 0, 2, &img)),
            ("mask", &split(&a_mask, 0, 2, &mask)),
        ],
        false,
    );
    write_npz(
        &npz.join("b.npz"),
        &[
            ("mask", &split(&a_mask, 2, 5, &mask)),
            ("image", &split(&a_img, 2, 5, &img)),
        ],
        true,
    );
    assert_eq!(load(&npz, &inputs).unwrap(), expected, ".npz folder");

    // test_data_set_K folders of input_K.pb, one sample each (numbered past 9 to check
    // the order is by name, as onnx writes them).
    let sets = d.join("sets");
    for (i, s) in expected.iter().enumerate() {
        let set = sets.join(format!("test_data_set_{i}"));
        std::fs::create_dir_all(&set).unwrap();
        write_pb(&set.join("input_0.pb"), &s[0]);
        write_pb(&set.join("input_1.pb"), &s[1]);
    }
    assert_eq!(load(&sets, &inputs).unwrap(), expected, "test_data_set_*");
    assert_eq!(
        load(&sets.join("test_data_set_3"), &inputs).unwrap(),
        vec![expected[3].clone()],
        "one test_data_set folder"
    );

    // A lone .npy for a one-input model.
    let lone = d.join("image.npy");
    write_npy(&lone, &stacked(5, &img, 0.0));
    let one: Vec<Vec<Tensor>> = expected.iter().map(|s| vec![s[0].clone()]).collect();
    assert_eq!(load(&lone, &inputs[..1]).unwrap(), one, "lone .npy");
}

#[test]
fn mistakes_are_one_error_naming_file_and_input() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let img = [1, 2, 3];
    let one = [spec("image", DType::F32, &img)];
    let two = [
        spec("image", DType::F32, &img),
        spec("mask", DType::F32, &[1, 4]),
    ];
    let lone = d.join("x.npy");
    write_npy(&lone, &stacked(3, &img, 0.0));
    let err = |path: &Path, inputs: &[InputSpec]| load(path, inputs).unwrap_err();

    let e = err(&lone, &two);
    assert!(e.contains("x.npy") && e.contains("image, mask"), "{e}");

    let wrong_shape = d.join("wrong.npy");
    write_npy(&wrong_shape, &Tensor::from_vec(&[3, 2, 4], vec![0f32; 24]));
    let e = err(&wrong_shape, &one);
    assert!(
        e.contains("wrong.npy") && e.contains("'image'") && e.contains("[3, 2, 4]"),
        "{e}"
    );

    let wrong_dtype = d.join("ints.npy");
    write_npy(&wrong_dtype, &Tensor::from_vec(&[3, 2, 3], vec![0i64; 18]));
    let e = err(&wrong_dtype, &one);
    assert!(e.contains("ints.npy") && e.contains("int64"), "{e}");

    let folder = d.join("partial");
    std::fs::create_dir(&folder).unwrap();
    write_npy(&folder.join("image.npy"), &stacked(3, &img, 0.0));
    let e = err(&folder, &two);
    assert!(e.contains("mask.npy") && e.contains("'mask'"), "{e}");
    write_npy(&folder.join("mask.npy"), &stacked(2, &[1, 4], 0.0));
    let e = err(&folder, &two);
    assert!(
        e.contains("3 calibration samples") && e.contains("'mask' has 2"),
        "{e}"
    );

    let bad_zip = d.join("zips");
    std::fs::create_dir(&bad_zip).unwrap();
    std::fs::write(bad_zip.join("broken.npz"), b"not a zip").unwrap();
    let e = err(&bad_zip, &one);
    assert!(e.contains("broken.npz"), "{e}");

    let truncated = d.join("sets/test_data_set_0");
    std::fs::create_dir_all(&truncated).unwrap();
    std::fs::write(truncated.join("input_0.pb"), [0x0a, 0xff]).unwrap();
    let e = err(&d.join("sets"), &one);
    assert!(e.contains("input_0.pb"), "{e}");
}
