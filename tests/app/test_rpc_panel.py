"""The Backend page's RPC panel: share this machine (a real `rpc serve` child), then use it
as another machine and reload the model across it."""

from __future__ import annotations

from engine.rpc.endpoints import hello
from engine.synth.demo import demo_model_path
from tests.app.conftest import load
from tests.engine.rpc.conftest import free_port


def test_share_this_machine_then_pool_the_model_over_it(qtbot, window, tmp_path):
    page = window.pages["backend"]
    panel = page.rpc
    window.show_page("backend")
    panel.port.setValue(free_port())
    panel.network.setChecked(True)
    assert "no authentication" in panel.serve_status.text()  # said before anything listens
    panel.network.setChecked(False)
    panel.toggle_serving()
    assert panel.serving and "Sharing" in panel.serve_status.text() and panel.serve_btn.text() == "Stop sharing"
    ep = panel.server.endpoint
    assert hello(ep) == (7, 0, 0) and not panel.port.isEnabled()
    assert window.ctx.settings.rpc.serve_port == ep.port

    load(qtbot, window, demo_model_path())
    panel.endpoints.setText(f" {ep} ")
    task = panel.check()
    qtbot.waitUntil(lambda: "RPC0" in panel.devices.text(), timeout=30000)
    assert task is not None and "this machine" in panel.devices.text() and "layers" in panel.devices.text()
    with qtbot.waitSignal(window.models.loaded, timeout=60000) as blocker:
        panel.apply()
    info = blocker.args[0]
    assert list(info.rpc) == [str(ep)] and info.placement["devices"][0]["endpoint"] == str(ep)
    assert window.ctx.settings.rpc.endpoints == [str(ep)]
    assert (
        "1 RPC server" in window.model_label.text()
        and "MTP head and output stay on this machine" in panel.devices.text()
    )
    panel.devices.setText("")
    assert panel.check() is None and "RPC0" in panel.devices.text()  # the loaded model's pool: no second client
    window.grab().save(str(tmp_path / "backend-rpc.png"))

    panel.endpoints.setText("no-port-here")
    panel.apply()
    assert "host:port" in panel.devices.text() and window.ctx.settings.rpc.endpoints == [str(ep)]  # nothing saved
    panel.endpoints.setText("")
    with qtbot.waitSignal(window.models.loaded, timeout=60000) as blocker:
        panel.apply()
    assert blocker.args[0].rpc == () and window.ctx.settings.rpc.endpoints == []
    assert panel.devices.text() == "This machine alone."
    panel.toggle_serving()
    assert not panel.serving and panel.serve_status.text() == "Not sharing."
