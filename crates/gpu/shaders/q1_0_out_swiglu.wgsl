// SwiGLU and its quantization as the Q1_0 product's epilogue (q1_0_gemv.wgsl's output
// interface), for a stacked gate|up matrix (the gate's N_FF rows, then up's): workgroup g takes
// the 32 gate rows and the 32 up rows of h's Q8_0 block g in TILES tiles of the split's rows
// (tile_rows, a divisor of 32: 16 at 64 lanes, 32 at 32; TILES = 64 / tile_rows), keeps their
// sums in workgroup memory — each row's sum is the plain product's, whichever workgroup computes
// it — then computes the block's h = silu(gate) · up with
// swiglu_quantize.wgsl's expression and quantizes it with the joined block piece's `store_wg`
// (q8_0_block_wg.wgsl, with q8_0_meta.wgsl or q8_1_meta.wgsl): the bits of the product, then
// `swiglu_quantize`, without writing the gate|up output.

// Values of h: the gate's rows (a multiple of 32).
override N_FF: u32;

@group(0) @binding(4) var<storage, read_write> words: array<u32>;
@group(0) @binding(6) var<storage, read_write> block_meta: array<u32>;

// The workgroup's 32 gate sums, then its 32 up sums.
var<workgroup> gate_up_sums: array<f32, 64>;

fn tile_row0(g: u32, tile: u32, tile_rows: u32) -> u32 {
    // Tiles 0 .. half - 1 the gate's rows, then as many the up rows.
    let half = 32u / tile_rows;
    return (tile / half) * N_FF + 32u * g + (tile % half) * tile_rows;
}

fn emit(row: u32, local: u32, value: f32) {
    gate_up_sums[local] = value;
}

fn epilogue(lid: u32, g: u32) {
    workgroupBarrier();
    var v = 0.0;
    if lid < 32u {
        let gate = gate_up_sums[lid];
        v = (gate / (1.0 + exp(-gate))) * gate_up_sums[32u + lid];
    }
    store_wg(32u * g, lid, v, lid < 32u);
}
