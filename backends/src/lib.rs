//! kir-backends: the targets that execute or lower kir modules. Today: [`interp`], the CPU
//! interpreter that runs the IR as written (later also PTX and CUDA C).

pub mod interp;
