//! Creation with sizes the host cannot hold returns `Err`, never aborts.

use tensorfn_runtime::{shape, Cpu, Error, Tensor};

#[test]
fn overflowing_element_count_is_an_error() {
    let e = Tensor::<Cpu, f32, shape![_, _]>::zeros_dims(&[usize::MAX, 3]).unwrap_err();
    assert!(matches!(e, Error::Shape { .. }), "{e}");
    let e = Tensor::<Cpu, u8, shape![_, _]>::from_vec_dims(vec![1], &[usize::MAX, 2]).unwrap_err();
    assert!(e.to_string().contains("fits in usize"), "{e}");
}

#[test]
fn unallocatable_host_buffer_is_an_error_and_state_stays_usable() {
    let e = Tensor::<Cpu, f64, shape![_, _]>::randn_dims(1, &[1 << 31, 1 << 31]).unwrap_err();
    assert!(matches!(e, Error::HostOutOfMemory { .. }), "{e}");
    assert!(e.to_string().contains("out of host memory"), "{e}");
    let x = Tensor::<Cpu, f64, shape![4]>::randn(2).unwrap();
    assert_eq!(x.to_vec().unwrap().len(), 4);
}
