//! Compile-fail cases for tensorfn, run by trybuild (`tests/ui.rs`), and
//! compile-and-run cases, the modules of the `pass` test binary.
