//! From a generic `T: DType` to the concrete element type the loops are
//! written for.
//!
//! The backend trait is generic over sealed dtypes whose only methods are
//! conversions; the CPU loops need real arithmetic. `with_*_type!` picks
//! the concrete type from `T::KIND`, and the functions here reinterpret
//! buffers between `T` and that type, which are then the same type (a
//! checked invariant, since each dtype has exactly one `KIND`).

use std::any::TypeId;

fn assert_same<T: 'static, U: 'static>() {
    assert!(
        TypeId::of::<T>() == TypeId::of::<U>(),
        "dtype dispatch chose {} for {}",
        std::any::type_name::<U>(),
        std::any::type_name::<T>()
    );
}

/// `x` as a slice of `U`, which must be `T` itself.
pub(crate) fn slice<T: 'static, U: 'static>(x: &[T]) -> &[U] {
    assert_same::<T, U>();
    // SAFETY: `T` and `U` are the same type (checked above).
    unsafe { std::slice::from_raw_parts(x.as_ptr().cast::<U>(), x.len()) }
}

/// `x` as a mutable slice of `U`, which must be `T` itself.
pub(crate) fn slice_mut<T: 'static, U: 'static>(x: &mut [T]) -> &mut [U] {
    assert_same::<T, U>();
    // SAFETY: `T` and `U` are the same type (checked above).
    unsafe { std::slice::from_raw_parts_mut(x.as_mut_ptr().cast::<U>(), x.len()) }
}

/// `x` as a `Vec<U>`, which must be `Vec<T>` itself.
pub(crate) fn vec<T: 'static, U: 'static>(x: Vec<T>) -> Vec<U> {
    assert_same::<T, U>();
    let mut x = std::mem::ManuallyDrop::new(x);
    // SAFETY: `T` and `U` are the same type, so pointer, length, capacity
    // and allocation layout are those of a `Vec<U>`.
    unsafe { Vec::from_raw_parts(x.as_mut_ptr().cast::<U>(), x.len(), x.capacity()) }
}

/// `x` as a `U`, which must be `T` itself.
pub(crate) fn value<T: Copy + 'static, U: Copy + 'static>(x: T) -> U {
    assert_same::<T, U>();
    // SAFETY: `T` and `U` are the same type.
    unsafe { std::mem::transmute_copy(&x) }
}

/// Runs `$body` with `$U` naming the concrete type `$T` is, among the
/// listed ones (`$else` for any other). The arms are `if`s on constants
/// ([`Is`](crate::dtype::Is)), so an instance compiles only the body of
/// its own type (a `match` on `KIND` would compile every arm for every
/// dtype).
macro_rules! with_type_among {
    ($T:ty, $U:ident => $body:expr, [$($C:ty),+], $else:expr) => {{
        $(
            if <$T as $crate::dtype::Is<$C>>::IS {
                type $U = $C;
                $body
            } else
        )+
        { $else }
    }};
}

/// Runs `$body` with `$U` naming the concrete type of the numeric dtype
/// `$T` (every dtype but `bool`).
macro_rules! with_num_type {
    ($T:ty, $U:ident => $body:expr) => {
        $crate::cpu::typed::with_type_among!(
            $T, $U => $body,
            [f32, f64, half::f16, half::bf16, i32, i64, u8],
            unreachable!("`bool` is not a numeric dtype")
        )
    };
}

/// Runs `$body` with `$U` naming the concrete type of the floating-point
/// dtype `$T`.
macro_rules! with_float_type {
    ($T:ty, $U:ident => $body:expr) => {
        $crate::cpu::typed::with_type_among!(
            $T, $U => $body,
            [f32, f64, half::f16, half::bf16],
            unreachable!("`{}` is not a floating-point dtype", <$T as $crate::dtype::DType>::KIND.name())
        )
    };
}

/// Runs `$body` with `$U` naming the concrete type of the integer dtype
/// `$T`.
macro_rules! with_int_type {
    ($T:ty, $U:ident => $body:expr) => {
        $crate::cpu::typed::with_type_among!(
            $T, $U => $body,
            [i32, i64, u8],
            unreachable!("`{}` is not an integer dtype", <$T as $crate::dtype::DType>::KIND.name())
        )
    };
}

pub(crate) use {with_float_type, with_int_type, with_num_type, with_type_among};
