//! `.npy` reading and writing: round trips, byte-exact agreement with files NumPy writes,
//! hand-made headers of every version, and clear errors (never panics) on bad files.

use kir_backends::interp::HostData;
use kir_compiler::internal::npy::{parse, to_bytes, NpyArray, NpyDtype};

/// Reading f64 data in tests.
trait F64s {
    fn f64s(&self) -> &[f64];
}

impl F64s for HostData {
    fn f64s(&self) -> &[f64] {
        self.as_f64().expect("f64 data")
    }
}

/// A version-1 file as NumPy 2.x writes it: the dict padded with spaces to a 128-byte prefix.
fn numpy_v1(dict: &str, data: &[u8]) -> Vec<u8> {
    let mut v = b"\x93NUMPY\x01\x00\x76\x00".to_vec();
    v.extend_from_slice(dict.as_bytes());
    v.resize(127, b' ');
    v.push(b'\n');
    v.extend_from_slice(data);
    v
}

/// A file of version `major` with the header text exactly as given (no padding).
fn handmade(major: u8, header: &str, data: &[u8]) -> Vec<u8> {
    let mut v = b"\x93NUMPY".to_vec();
    v.extend_from_slice(&[major, 0]);
    if major == 1 {
        v.extend_from_slice(&(header.len() as u16).to_le_bytes());
    } else {
        v.extend_from_slice(&(header.len() as u32).to_le_bytes());
    }
    v.extend_from_slice(header.as_bytes());
    v.extend_from_slice(data);
    v
}

fn err(bytes: &[u8]) -> String {
    parse(bytes, "x.npy").expect_err("should fail").to_string()
}

#[test]
fn writes_what_numpy_writes() {
    let f32_data: Vec<u8> = [0.0f32, 0.5, 1.0, 1.5, 2.0, 2.5]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    let want = numpy_v1(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
        &f32_data,
    );
    assert_eq!(
        to_bytes(
            NpyDtype::F32,
            &[2, 3],
            &HostData::F64(vec![0.0, 0.5, 1.0, 1.5, 2.0, 2.5])
        ),
        want
    );
    let i64_data: Vec<u8> = [1i64, -2, 3].iter().flat_map(|x| x.to_le_bytes()).collect();
    let want = numpy_v1(
        "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }",
        &i64_data,
    );
    assert_eq!(
        to_bytes(NpyDtype::I64, &[3], &HostData::F64(vec![1.0, -2.0, 3.0])),
        want
    );
    let want = numpy_v1(
        "{'descr': '|u1', 'fortran_order': False, 'shape': (), }",
        &[7],
    );
    assert_eq!(to_bytes(NpyDtype::U8, &[], &HostData::F64(vec![7.0])), want);
}

#[test]
fn round_trips() {
    let cases: &[(NpyDtype, &[f64])] = &[
        (NpyDtype::F32, &[0.0, -1.5, 3.25, f64::INFINITY, 1e-40]),
        (NpyDtype::F64, &[0.1, -2.0, 1e300, -0.0, 5.0]),
        (NpyDtype::F16, &[0.5, -65504.0, 6.103515625e-5, 1.0, 2.0]),
        (
            NpyDtype::I32,
            &[0.0, -1.0, 2147483647.0, -2147483648.0, 7.0],
        ),
        (NpyDtype::I64, &[0.0, -1.0, 9007199254740992.0, -5.0, 7.0]),
        (NpyDtype::U8, &[0.0, 1.0, 255.0, 128.0, 15.0]),
    ];
    for &(dtype, data) in cases {
        let bytes = to_bytes(dtype, &[5, 1], &HostData::F64(data.to_vec()));
        assert_eq!(
            bytes.len() % 64,
            (5 * dtype.size()) % 64,
            "{dtype}: data must start 64-aligned"
        );
        let a = parse(&bytes, "r.npy").unwrap();
        let want = match dtype {
            NpyDtype::F32 => HostData::F64(data.iter().map(|&x| x as f32 as f64).collect()),
            // `<i8` reads back as exact integers.
            NpyDtype::I64 => HostData::I64(data.iter().map(|&x| x as i64).collect()),
            _ => HostData::F64(data.to_vec()),
        };
        assert_eq!(
            a,
            NpyArray {
                dtype,
                shape: vec![5, 1],
                data: want
            },
            "{dtype}"
        );
    }
    // f32 rounding is to nearest even.
    let a = parse(
        &to_bytes(
            NpyDtype::F32,
            &[1],
            &HostData::F64(vec![1.0 + 2f64.powi(-24)]),
        ),
        "r.npy",
    )
    .unwrap();
    assert_eq!(a.data.f64s(), vec![1.0]);
}

#[test]
fn reads_every_version_and_dtype() {
    let h = |d: &str, shape: &str| {
        format!("{{'descr': '{d}', 'fortran_order': False, 'shape': {shape}, }}\n")
    };
    for major in [1, 2, 3] {
        let a = parse(
            &handmade(
                major,
                &h("<i4", "(2,)"),
                &[1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff],
            ),
            "v.npy",
        )
        .unwrap();
        assert_eq!(
            (a.dtype, a.shape, a.data.f64s().to_vec()),
            (NpyDtype::I32, vec![2], vec![1.0, -1.0]),
            "version {major}"
        );
    }
    let one = |d: &str, bytes: &[u8]| {
        parse(&handmade(1, &h(d, "(1,)"), bytes), "d.npy")
            .unwrap()
            .data
            .f64s()[0]
    };
    assert_eq!(one("<f8", &2.5f64.to_le_bytes()), 2.5);
    assert_eq!(one("<f2", &[0x00, 0x3c]), 1.0);
    assert_eq!(one("<i2", &[0xfe, 0xff]), -2.0);
    assert_eq!(one("<u4", &[0xff, 0xff, 0xff, 0xff]), 4294967295.0);
    assert_eq!(one("|u1", &[200]), 200.0);
    assert_eq!(one("|i1", &[0xff]), -1.0);
    assert_eq!(one("|b1", &[1]), 1.0);
    assert_eq!(one("<u1", &[3]), 3.0);
    // Key order and quoting do not matter; a shape with a trailing comma and spaces parses.
    let hdr = "{\"shape\": ( 2 , 2 , ), \"fortran_order\": False, \"descr\": \"<f4\"}";
    let a = parse(&handmade(1, hdr, &[0; 16]), "k.npy").unwrap();
    assert_eq!(a.shape, vec![2, 2]);
    // Empty arrays.
    let a = parse(&handmade(1, &h("<f4", "(0, 3)"), &[]), "e.npy").unwrap();
    assert_eq!((a.shape, a.data.f64s().len()), (vec![0, 3], 0));
}

#[test]
fn clear_errors_on_bad_files() {
    let h = |d: &str, fortran: &str, shape: &str| {
        format!("{{'descr': '{d}', 'fortran_order': {fortran}, 'shape': {shape}, }}\n")
    };
    let e = err(&handmade(1, &h("<f4", "True", "(2, 2)"), &[0; 16]));
    assert!(e.starts_with("x.npy: ") && e.contains("Fortran"), "{e}");
    let e = err(&handmade(1, &h("<f4", "False", "(2, 2)"), &[0; 15]));
    assert!(
        e.contains("truncated") && e.contains("16") && e.contains("15"),
        "{e}"
    );
    let e = err(&handmade(1, &h("<f4", "False", "(2,)"), &[0; 9]));
    assert!(e.contains("too long"), "{e}");
    assert!(err(&handmade(1, &h(">f4", "False", "(1,)"), &[0; 4])).contains("big-endian"));
    assert!(
        err(&handmade(1, &h("<c8", "False", "(1,)"), &[0; 8])).contains("unsupported dtype `<c8`")
    );
    assert!(err(&handmade(4, &h("<f4", "False", "(1,)"), &[0; 4])).contains("version 4"));
    assert!(
        err(&handmade(1, "{'descr': '<f4', 'shape': (1,)}", &[0; 4])).contains("fortran_order")
    );
    assert!(err(&handmade(1, &h("<f4", "False", "(-1,)"), &[])).contains("bad header"));
    assert!(err(&handmade(1, &h("<f4", "Maybe", "(1,)"), &[0; 4])).contains("True or False"));
    let huge = "(4294967296, 4294967296, 4294967296)";
    assert!(err(&handmade(1, &h("<f4", "False", huge), &[])).contains("too large"));
    assert!(err(b"").contains("not an .npy file"));
    assert!(err(b"PK\x03\x04 this is a zip").contains("not an .npy file"));
    // A header that claims more bytes than the file has.
    let mut v = handmade(1, &h("<f4", "False", "(1,)"), &[0; 4]);
    v[8] = 0xff;
    v[9] = 0xff;
    assert!(err(&v).contains("truncated header"), "{}", err(&v));
}

#[test]
fn no_prefix_or_corruption_panics() {
    let good = to_bytes(NpyDtype::F32, &[3, 4], &HostData::F64(vec![1.0; 12]));
    for n in 0..good.len() {
        assert!(
            parse(&good[..n], "p.npy").is_err(),
            "prefix of {n} bytes parsed"
        );
    }
    // Flip bytes across the header and data; every outcome is Ok or a clear Err.
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..5000 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let mut v = good.clone();
        let i = (state as usize) % v.len();
        v[i] = (state >> 32) as u8;
        if let Err(e) = parse(&v, "c.npy") {
            assert!(e.to_string().starts_with("c.npy: "));
        }
    }
}
