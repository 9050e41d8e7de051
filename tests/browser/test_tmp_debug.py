from tests.browser.conftest import run_notebook
from tests.browser.test_tmp_themes import CELLS


def test_dbg(lab, page):
    try:
        run_notebook(lab, page, CELLS, "dbg.ipynb", timeout_s=150)
    finally:
        page.screenshot(path="/tmp/dbg.png", full_page=False)
        txt = page.evaluate("() => [...document.querySelectorAll('.jp-CodeCell')].map(c => (c.querySelector('.jp-InputPrompt')||{}).textContent + ' | ' + (c.querySelector('.jp-OutputArea')||{innerText:''}).innerText.slice(0,150))")
        print("\n".join(txt))
