// Compiles the C example's tiny CNN into OUT_DIR/libtiny_cnn.a and the Rust module
// OUT_DIR/tiny_cnn.rs, for cargo's TARGET; and the same CNN with its batch axis named
// "N" once for every batch of 1 to 4 images (`tiny_cnn_batch`).
fn main() {
    nnc_build::Model::new("../c/model.onnx")
        .name("tiny_cnn")
        .compile();
    nnc_build::Model::new("../c/batch_model.onnx")
        .name("tiny_cnn_batch")
        .dim_range("N", 1, 4)
        .compile();
}
