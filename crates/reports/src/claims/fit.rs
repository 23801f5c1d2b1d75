//! Least-squares fits for the claims: a line (bytes per sample over batch sizes) and a
//! quadratic (bytes per weight over widths), with the worst relative residual as the test of
//! the claimed shape.

/// y = intercept + slope * x.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Line {
    pub intercept: f64,
    pub slope: f64,
    /// max |y - fit| / y over the points.
    pub max_rel_residual: f64,
}

/// y = a x^2 + b x + c.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Quadratic {
    pub a: f64,
    pub b: f64,
    pub c: f64,
    pub max_rel_residual: f64,
}

pub fn line(points: &[(f64, f64)]) -> Option<Line> {
    let n = points.len() as f64;
    if points.len() < 2 {
        return None;
    }
    let (sx, sy) = points.iter().fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
    let (mx, my) = (sx / n, sy / n);
    let sxx: f64 = points.iter().map(|(x, _)| (x - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
    if sxx == 0.0 {
        return None;
    }
    let slope = sxy / sxx;
    let intercept = my - slope * mx;
    let max_rel_residual = max_residual(points, |x| intercept + slope * x);
    Some(Line { intercept, slope, max_rel_residual })
}

pub fn quadratic(points: &[(f64, f64)]) -> Option<Quadratic> {
    if points.len() < 3 {
        return None;
    }
    // Normal equations for [c, b, a] on powers 0..2, solved by Gaussian elimination.
    let s = |k: i32| points.iter().map(|(x, _)| x.powi(k)).sum::<f64>();
    let t = |k: i32| points.iter().map(|(x, y)| y * x.powi(k)).sum::<f64>();
    let mut m = [[s(0), s(1), s(2), t(0)], [s(1), s(2), s(3), t(1)], [s(2), s(3), s(4), t(2)]];
    for col in 0..3 {
        let pivot = (col..3).max_by(|&i, &j| m[i][col].abs().total_cmp(&m[j][col].abs()))?;
        m.swap(col, pivot);
        if m[col][col].abs() < f64::EPSILON {
            return None;
        }
        let pivot_row = m[col];
        for (row, r) in m.iter_mut().enumerate() {
            if row != col {
                let f = r[col] / pivot_row[col];
                for (v, p) in r.iter_mut().zip(pivot_row).skip(col) {
                    *v -= f * p;
                }
            }
        }
    }
    let (c, b, a) = (m[0][3] / m[0][0], m[1][3] / m[1][1], m[2][3] / m[2][2]);
    let max_rel_residual = max_residual(points, |x| a * x * x + b * x + c);
    Some(Quadratic { a, b, c, max_rel_residual })
}

fn max_residual(points: &[(f64, f64)], f: impl Fn(f64) -> f64) -> f64 {
    points.iter().map(|&(x, y)| if y == 0.0 { 0.0 } else { ((y - f(x)) / y).abs() }).fold(0.0, f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_recovered() {
        let pts: Vec<_> = [1.0, 2.0, 4.0, 8.0].iter().map(|&x| (x, 100.0 + 3.0 * x)).collect();
        let l = line(&pts).unwrap();
        assert!((l.slope - 3.0).abs() < 1e-9 && (l.intercept - 100.0).abs() < 1e-9);
        assert!(l.max_rel_residual < 1e-12);
        let bent: Vec<_> = [1.0, 2.0, 4.0, 8.0].iter().map(|&x| (x, x * x)).collect();
        assert!(line(&bent).unwrap().max_rel_residual > 0.1, "a parabola is not a line");
        assert!(line(&[(1.0, 1.0)]).is_none());
    }

    #[test]
    fn a_quadratic_is_recovered() {
        let pts: Vec<_> =
            [256.0, 512.0, 1024.0, 4096.0].iter().map(|&x| (x, 16.0 * x * x + 900.0 * x + 5e6)).collect();
        let q = quadratic(&pts).unwrap();
        assert!((q.a - 16.0).abs() < 1e-6, "{q:?}");
        assert!((q.b - 900.0).abs() < 1e-3 && (q.c - 5e6).abs() < 1.0, "{q:?}");
    }
}
