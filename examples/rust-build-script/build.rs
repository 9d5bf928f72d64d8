// Compiles the C example's tiny CNN into OUT_DIR/libtiny_cnn.a and the Rust module
// OUT_DIR/tiny_cnn.rs, for cargo's TARGET.
fn main() {
    nnc_build::Model::new("../c/model.onnx")
        .name("tiny_cnn")
        .compile();
}
