"""Small QtCharts wrappers: a time line and a bar chart with sensible axes.

QtCharts (in PySide6-Addons) renders with QPainter, so the graphs work offscreen, in
tests and in the frozen app, without QML or a plotting library.
"""

from __future__ import annotations

from PySide6.QtCharts import QBarCategoryAxis, QBarSeries, QBarSet, QChart, QChartView, QLineSeries, QValueAxis
from PySide6.QtCore import QMargins, QPointF, Qt
from PySide6.QtGui import QColor, QPainter, QPen

BLUE = QColor("#3d7bf0")
ORANGE = QColor("#e07b39")
GREY = QColor("#8a8f98")
GREEN = QColor("#1f8a5b")


def _chart(title: str, series, x, y) -> QChart:
    """A titled chart holding ``series`` on axes ``x`` (bottom) and ``y`` (left)."""
    chart = QChart()
    chart.setTitle(title)
    chart.legend().setVisible(False)
    chart.setMargins(QMargins(4, 4, 4, 4))
    chart.setBackgroundRoundness(6)
    chart.addSeries(series)
    chart.addAxis(x, Qt.AlignmentFlag.AlignBottom)
    chart.addAxis(y, Qt.AlignmentFlag.AlignLeft)
    series.attachAxis(x)
    series.attachAxis(y)
    return chart


def _setup_view(view: QChartView) -> None:
    view.setRenderHint(QPainter.RenderHint.Antialiasing)
    view.setMinimumHeight(180)


class LineChart(QChartView):
    """One series over time; ``set_points`` replaces the data (x: seconds)."""

    def __init__(self, title: str, y_label: str, *, y_max: float | None = None, color: QColor = BLUE):
        self.series = QLineSeries()
        self.series.setPen(QPen(color, 2))
        self.x = QValueAxis()
        self.x.setTitleText("seconds")
        self.x.setLabelFormat("%.1f")
        self.y = QValueAxis()
        self.y.setTitleText(y_label)
        self.y.setLabelFormat("%.2f" if y_max == 1.0 else "%.0f")
        self.y_max = y_max
        self.scale = 1.0
        super().__init__(_chart(title, self.series, self.x, self.y))
        _setup_view(self)
        self.set_points([])

    def set_points(self, points: list[tuple[float, float]]) -> None:
        """Points in seconds; a run shorter than 2 s is drawn in milliseconds."""
        xs = [p[0] for p in points] or [0.0, 1.0]
        scale, unit = (1000.0, "milliseconds") if max(xs) < 2.0 else (1.0, "seconds")
        self.series.replace([QPointF(x * scale, y) for x, y in points])
        self.x.setTitleText(unit)
        self.x.setLabelFormat("%.0f" if scale > 1 or max(xs) >= 20 else "%.1f")
        lo, hi = min(xs) * scale, max(xs) * scale
        self.x.setRange(lo, max(hi, lo + 1e-3))
        ys = [p[1] for p in points] or [0.0]
        top = self.y_max if self.y_max is not None else max(ys) * 1.15 or 1.0
        self.y.setRange(0.0, top)
        self.scale = scale

    def points(self) -> list[tuple[float, float]]:
        """The series, back in seconds."""
        return [(p.x() / self.scale, p.y()) for p in self.series.points()]


class BarChart(QChartView):
    """Bars by category; ``set_bars`` replaces labels and values."""

    def __init__(
        self, title: str, y_label: str, *, y_max: float | None = None, color: QColor = BLUE, integer: bool = False
    ):
        self.integer = integer
        self.bar_set = QBarSet(y_label)
        self.bar_set.setColor(color)
        self.series = QBarSeries()
        self.series.append(self.bar_set)
        self.x = QBarCategoryAxis()
        self.y = QValueAxis()
        self.y.setTitleText(y_label)
        self.y.setLabelFormat("%.2f" if y_max == 1.0 else "%d" if integer else "%.0f")
        self.y_max = y_max
        super().__init__(_chart(title, self.series, self.x, self.y))
        _setup_view(self)
        self.set_bars([], [])

    def set_bars(self, labels: list[str], values: list[float]) -> None:
        self.bar_set.remove(0, self.bar_set.count())
        self.bar_set.append([float(v) for v in values])
        self.x.clear()
        self.x.append(labels or [""])
        if self.y_max is not None:
            self.y.setRange(0.0, self.y_max)
        else:
            top = max(values) if values and max(values) > 0 else 1.0
            if self.integer:  # at most 6 whole-number ticks (more are elided to "...")
                n = int(top) + 1
                step = -(-n // 5)
                n = -(-n // step) * step
                top = float(n)
                self.y.setTickCount(n // step + 1)
            self.y.setRange(0.0, top * (1.0 if self.integer else 1.15))

    def values(self) -> list[float]:
        return [self.bar_set.at(i) for i in range(self.bar_set.count())]

    def labels(self) -> list[str]:
        return list(self.x.categories())
