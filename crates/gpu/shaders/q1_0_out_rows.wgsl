// The Q1_0 product's rows written out (q1_0_gemv.wgsl's output interface): workgroup g takes the
// TILES tiles of rows after the earlier workgroups', and each row's sum goes to out[row].

// The residual epilogue: out[row] += the product (out = x + W·a in one dispatch), the same f32
// addition as a separate add.
override ACCUM: bool = false;

@group(0) @binding(4) var<storage, read_write> out: array<f32>;

fn tile_row0(g: u32, tile: u32, tile_rows: u32) -> u32 {
    return (g * TILES + tile) * tile_rows;
}

fn emit(row: u32, local: u32, value: f32) {
    if ACCUM {
        out[row] += value;
    } else {
        out[row] = value;
    }
}

fn epilogue(lid: u32, g: u32) {}
