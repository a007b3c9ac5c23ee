//! The structs of `fail/params_derive.rs` written correctly: named fields
//! (the keys), `rename = ".."` for a key that is not the field's name, and
//! a count kept outside the parameters.
use tensorfn::prelude::*;

#[derive(Params)]
struct Pair<D: Device> {
    first: Tensor<D, f32, shape![2]>,
    second: Tensor<D, f32, shape![2]>,
}

#[derive(Params)]
struct Renamed<D: Device> {
    #[params(rename = "w")]
    weight: Tensor<D, f32, shape![2]>,
}

struct WithCount<D: Device> {
    params: Renamed<D>,
    count: usize,
}

#[test]
fn runs() -> Result<()> {
    let pair = Pair::<Cpu> {
        first: Tensor::ones()?,
        second: Tensor::zeros()?,
    };
    let mut names = Vec::new();
    pair.visit(&mut |name, _| {
        names.push(name.to_string());
        Ok(())
    })?;
    assert_eq!(names, ["first", "second"]);

    let r = WithCount::<Cpu> {
        params: Renamed {
            weight: Tensor::ones()?,
        },
        count: 3,
    };
    let mut names = Vec::new();
    r.params.visit(&mut |name, _| {
        names.push(name.to_string());
        Ok(())
    })?;
    assert_eq!((names, r.count), (vec!["w".to_string()], 3));
    Ok(())
}
