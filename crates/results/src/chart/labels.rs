//! Labels beside their points, none over another or over a point: each label takes the first
//! free place, in pixels, beside its own point (right, then left, at its height, then a row
//! above or below at a time), inside the plot. Pure geometry, so that it is tested apart from
//! drawing; the charts that label points (the step-time trade-off) hand in their points and
//! their labels' sizes.

/// A box in pixels, `x0..x1` across and `y0..y1` down (the plot's top left is 0, 0).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Rect {
    x0: i32,
    y0: i32,
    x1: i32,
    y1: i32,
}

impl Rect {
    fn meets(&self, o: &Rect) -> bool {
        self.x0 < o.x1 && o.x0 < self.x1 && self.y0 < o.y1 && o.y0 < self.y1
    }
}

/// Where a label goes: `x` its left edge (`left_anchored`) or its right edge, `y` its middle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placed {
    pub x: i32,
    pub y: i32,
    pub left_anchored: bool,
}

/// The gap between a point and its label, and the room a point's marker takes around it.
const GAP: i32 = 14;
const MARKER: i32 = 9;
/// How far a label may move up or down from its point's height, a row at a time.
const ROWS: i32 = 10;

/// Places a label of `sizes[i]` (width, height) beside each of `points` (in pixels) in a plot of
/// `plot` (width, height): the first place, nearest its point's height first, that is inside the
/// plot and meets neither a label placed before it nor a marker (`markers`: every point drawn,
/// labelled or not). A label with no free place (a crowd) goes right of its point, at its height.
pub fn place(
    points: &[(i32, i32)],
    sizes: &[(u32, u32)],
    plot: (u32, u32),
    markers: &[(i32, i32)],
) -> Vec<Placed> {
    let (w, h) = (plot.0 as i32, plot.1 as i32);
    let markers: Vec<Rect> = markers
        .iter()
        .map(|&(x, y)| Rect { x0: x - MARKER, y0: y - MARKER, x1: x + MARKER, y1: y + MARKER })
        .collect();
    let mut taken: Vec<Rect> = Vec::new();
    let mut out = Vec::new();
    for (&(px, py), &(lw, lh)) in points.iter().zip(sizes) {
        let (lw, lh) = (lw as i32, lh as i32);
        let row = lh + 4;
        let boxed = |left_anchored: bool, dy: i32| {
            let y = py + dy;
            let (x0, x1) = if left_anchored { (px + GAP, px + GAP + lw) } else { (px - GAP - lw, px - GAP) };
            let placed = Placed { x: if left_anchored { x0 } else { x1 }, y, left_anchored };
            (placed, Rect { x0, y0: y - lh / 2 - 1, x1, y1: y + lh / 2 + 1 })
        };
        let shifts = std::iter::once(0).chain((1..=ROWS).flat_map(|k| [-k * row, k * row]));
        let free = shifts.flat_map(|dy| [boxed(true, dy), boxed(false, dy)]).find(|(_, b)| {
            b.x0 >= 0
                && b.y0 >= 0
                && b.x1 <= w
                && b.y1 <= h
                && !taken.iter().chain(&markers).any(|t| t.meets(b))
        });
        let (placed, b) = free.unwrap_or_else(|| boxed(true, 0));
        taken.push(b);
        out.push(placed);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn boxes(sizes: &[(u32, u32)], placed: &[Placed]) -> Vec<Rect> {
        placed
            .iter()
            .zip(sizes)
            .map(|(p, &(w, h))| {
                let x0 = if p.left_anchored { p.x } else { p.x - w as i32 };
                Rect { x0, y0: p.y - h as i32 / 2, x1: x0 + w as i32, y1: p.y + h as i32 / 2 }
            })
            .collect()
    }

    #[test]
    fn a_lone_point_is_labelled_at_its_right_and_at_the_edge_at_its_left() {
        let p = place(&[(100, 200)], &[(200, 20)], (1000, 500), &[(100, 200)]);
        assert_eq!(p, [Placed { x: 114, y: 200, left_anchored: true }]);
        let p = place(&[(900, 200)], &[(200, 20)], (1000, 500), &[(900, 200)]);
        assert_eq!(p, [Placed { x: 886, y: 200, left_anchored: false }]);
    }

    #[test]
    fn labels_of_points_close_together_take_places_apart_and_off_every_point() {
        // What overlapped on the committed charts: two points 100 px apart, 10 px in height,
        // labels 200 px wide; and a crowd of five.
        let cases: [&[(i32, i32)]; 2] =
            [&[(800, 420), (700, 412)], &[(500, 300), (520, 305), (540, 298), (480, 310), (510, 290)]];
        for points in cases {
            let sizes = vec![(210, 16); points.len()];
            let placed = place(points, &sizes, (1100, 600), points);
            let b = boxes(&sizes, &placed);
            for i in 0..b.len() {
                for j in i + 1..b.len() {
                    assert!(!b[i].meets(&b[j]), "{points:?}: labels {i} and {j}: {placed:?}");
                }
                for &(x, y) in points {
                    let marker = Rect { x0: x - MARKER, y0: y - MARKER, x1: x + MARKER, y1: y + MARKER };
                    assert!(!b[i].meets(&marker), "label {i} over the point at ({x}, {y}): {placed:?}");
                }
                assert!(b[i].x0 >= 0 && b[i].x1 <= 1100 && b[i].y0 >= 0 && b[i].y1 <= 600);
            }
        }
    }
}
