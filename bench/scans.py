"""Scanned pages of known text, and how close a reading of them comes: the material of
``bench ocr`` and of the OCR tests.

A page is text drawn with a real font (WenQuanYi Micro Hei, which has Latin and CJK glyphs) on
A4 paper at 200 dpi, turned by a slight angle and given Gaussian noise, as a flatbed scan of a
printed page looks. Lines are drawn from fixed pools of Chinese and English sentences in a seeded
order, so every page differs and every run draws the same pages.
"""

from __future__ import annotations

import io
import random
import re
import unicodedata
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

DPI = 200
FONT_PATHS = (
    Path("/usr/share/fonts/truetype/wqy/wqy-microhei.ttc"),
    Path("/usr/share/fonts/wenquanyi/wqy-microhei/wqy-microhei.ttc"),
)

ENGLISH = [
    "Maintenance schedules keep the cooling plant running through the summer peak.",
    "Inspect the bearings of every circulation pump once a month and log the readings.",
    "A vibration above 4.5 mm/s means the coupling must be realigned within a week.",
    "The supplier quoted 1,250 EUR for the replacement seal kit, delivered in 10 days.",
    "Operators wear hearing protection near the compressor hall at all times.",
    "If the pressure drops below 2.1 bar, switch to the standby pump at once.",
    "Water samples are taken every Tuesday and sent to the laboratory in Lyon.",
    "The annual audit found three valves with minor leaks; all were repaired in May.",
    "Visitors must sign in at the front desk and receive a temporary badge.",
    "The invoice number appears in the top right corner of every page.",
    "Payment is due within thirty days of the invoice date, without deduction.",
    "Late payments are charged interest at the statutory rate plus two percent.",
    "This agreement is governed by the laws of the State of New York.",
    "Either party may terminate the contract with ninety days of written notice.",
    "The warranty covers defects in material and workmanship for two years.",
    "Keep the original receipt; it is required for any claim under the warranty.",
    "Fire doors on the second floor must stay closed and free of obstructions.",
    "The emergency assembly point is the north car park, next to the gatehouse.",
    "New employees complete the safety induction during their first week.",
    "Report every near miss to your supervisor before the end of the shift.",
    "Backups of the customer database run nightly at 02:00 and are kept for 35 days.",
    "Passwords must be at least twelve characters long and changed every year.",
    "The quarterly report compares revenue, costs and margins with the budget.",
    "Sales in the northern region grew by 8% while the south remained flat.",
    "Meeting rooms can be booked through the intranet up to four weeks ahead.",
    "The cafeteria is open from 7:30 to 14:00 on working days only.",
    "Return the signed copy of this notice to the human resources office.",
    "All shipments leave the warehouse before noon and arrive the next day.",
    "Damaged goods must be reported within 48 hours of delivery, with photos.",
    "The tenant shall keep the premises clean and in good repair at all times.",
]

CHINESE = [
    "冷却系统的维护计划确保夏季用电高峰期间设备稳定运行。",
    "每月检查一次循环泵的轴承，并在记录表中填写读数。",
    "振动值超过每秒四点五毫米时，必须在一周内重新校准联轴器。",
    "供应商对密封件更换套件的报价为一千二百五十欧元。",
    "操作人员在压缩机房附近工作时应始终佩戴护耳设备。",
    "如果压力低于二点一巴，请切换到备用泵并联系工程师。",
    "每周二采集水样并送往实验室进行化验分析。",
    "年度审计发现三个阀门存在轻微泄漏，已于五月全部修复。",
    "访客须在前台登记，并领取临时通行证后方可进入厂区。",
    "发票号码位于每一页的右上角，请在付款时注明。",
    "款项应在发票开具之日起三十日内全额支付。",
    "逾期付款将按法定利率另加百分之二计收利息。",
    "本合同适用中华人民共和国法律，并按其解释。",
    "任何一方均可提前九十天书面通知对方解除本合同。",
    "保修范围包括材料和工艺缺陷，保修期为两年。",
    "请妥善保管购物凭证，保修索赔时须出示原件。",
    "二楼的防火门必须保持关闭，门前不得堆放杂物。",
    "紧急集合点位于北侧停车场，靠近门卫室。",
    "新员工须在入职第一周内完成安全培训。",
    "每次未遂事故都应在当班结束前报告主管。",
    "客户数据库每晚两点备份，备份文件保留三十五天。",
    "密码长度不得少于十二位，并且每年至少更换一次。",
    "季度报告将收入、成本和利润率与预算进行比较。",
    "北方地区销售额增长百分之八，南方地区基本持平。",
    "会议室可以通过内网提前四周进行预订。",
    "员工食堂仅在工作日早上七点半至下午两点开放。",
    "请将签字后的通知书交回人力资源部办公室。",
    "所有货物均在中午前出库，并于次日送达客户。",
    "货物如有损坏，须在收货后四十八小时内拍照报告。",
    "承租人应始终保持房屋清洁，并负责日常维修。",
]

LANGUAGES = {"en": ENGLISH, "zh": CHINESE}


def font_path() -> Path:
    for path in FONT_PATHS:
        if path.exists():
            return path
    raise FileNotFoundError(
        "no CJK font for the scanned pages: install fonts-wqy-microhei (make browsers does)"
    )


def page_lines(language: str, seed: int, count: int = 14) -> list[str]:
    """`count` sentences of `language` in an order fixed by `seed`."""
    return random.Random(f"{language}-{seed}").sample(LANGUAGES[language], count)  # noqa: S311


def render_scan(
    lines: list[str],
    *,
    seed: int = 0,
    angle: float = 1.0,
    noise: float = 12.0,
    dpi: int = DPI,
    font_points: int = 12,
    strip: bool = False,
) -> Image.Image:
    """`lines` printed on A4 at `dpi`, turned by `angle` degrees, with Gaussian noise of
    standard deviation `noise` grey levels: a greyscale image. A `strip` is only as tall as the
    lines (a cut-out of a page, quicker to read in tests)."""
    size = round(font_points / 72 * dpi)
    pitch = int(size * 1.8)
    margin = int((0.3 if strip else 0.8) * dpi)
    width = int(8.27 * dpi)
    height = 2 * margin + pitch * len(lines) if strip else int(11.69 * dpi)
    page = Image.new("L", (width, height), 255)
    draw = ImageDraw.Draw(page)
    font = ImageFont.truetype(str(font_path()), size)
    for number, line in enumerate(lines):
        draw.text((margin, margin + number * pitch), line, font=font, fill=0)
    page = page.rotate(angle, resample=Image.Resampling.BICUBIC, fillcolor=255)
    grain = np.random.default_rng(seed).normal(0, noise, (height, width))
    pixels = np.clip(np.asarray(page, dtype=np.float32) + grain, 0, 255).astype(np.uint8)
    return Image.fromarray(pixels)


def scanned_pdf(pages: list[Image.Image], dpi: int = DPI) -> bytes:
    """A PDF of page images only (no text layer), as a scanner writes one (Pillow's writer)."""
    out = io.BytesIO()
    first, *rest = pages
    first.save(out, "PDF", resolution=dpi, save_all=True, append_images=rest)
    return out.getvalue()


_SPACE = re.compile(r"\s+")
_SPACE_BY_CJK = re.compile(r"(?<=[\u2e80-\u9fff\uff00-\uffef]) | (?=[\u2e80-\u9fff\uff00-\uffef])")


def normalised(text: str) -> str:
    """Text as compared: NFKC (full-width and half-width punctuation alike), whitespace runs
    as one space, and no space next to a CJK character (Chinese has none between words)."""
    text = _SPACE.sub(" ", unicodedata.normalize("NFKC", text)).strip()
    return _SPACE_BY_CJK.sub("", text)


def character_accuracy(reference: str, reading: str) -> float:
    """1 - (Levenshtein distance / reference length), on normalised texts; at least 0."""
    ref, hyp = normalised(reference), normalised(reading)
    if not ref:
        return 1.0 if not hyp else 0.0
    previous = list(range(len(hyp) + 1))
    for i, expected in enumerate(ref, 1):
        current = [i]
        for j, got in enumerate(hyp, 1):
            current.append(
                min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (expected != got))
            )
        previous = current
    return max(0.0, 1 - previous[-1] / len(ref))
