"""The side-by-side comparison figure of ``mcnet-sr --compare``: full images on top, the most detailed crop
zoomed below."""
import cv2
import numpy as np


def to_u8_bgr(t):
    """Float (1, C, H, W) RGB/gray [0, 1] -> uint8 HxWx3 BGR (gray replicated) and the metric image."""
    arr = np.rint(t[0].clamp(0, 1).cpu().numpy() * 255.0).astype(np.uint8)
    if arr.shape[0] == 1:
        return np.repeat(arr[0][:, :, None], 3, axis=2), arr[0]
    bgr = np.ascontiguousarray(arr[::-1].transpose(1, 2, 0))
    return bgr, bgr


def _crop_box(y_u8, size):
    """Top-left corner of the ``size`` window with the most detail (gradient energy) in a uint8 image."""
    img = y_u8.astype(np.float32)
    energy = np.abs(cv2.Sobel(img, cv2.CV_32F, 1, 0)) + np.abs(cv2.Sobel(img, cv2.CV_32F, 0, 1))
    h, w = img.shape
    ch, cw = size
    win = cv2.boxFilter(energy, -1, (cw, ch), normalize=False, anchor=(0, 0), borderType=cv2.BORDER_CONSTANT)
    win = win[:h - ch + 1, :w - cw + 1]
    y0, x0 = np.unravel_index(int(np.argmax(win)), win.shape)
    return int(y0), int(x0)


def _title_bar(text, width, lines=1, height=26):
    """A white bar of ``lines`` text rows (``height`` pixels each) with ``text``'s lines centred, one font size."""
    rows = text.split('\n')
    bar = np.full((height * max(lines, len(rows)), width, 3), 255, np.uint8)
    font, scale = cv2.FONT_HERSHEY_SIMPLEX, 0.5
    while scale > 0.25 and max(cv2.getTextSize(row, font, scale, 1)[0][0] for row in rows) > width - 6:
        scale -= 0.05
    for i, row in enumerate(rows):
        (tw, th), _ = cv2.getTextSize(row, font, scale, 1)
        cv2.putText(bar, row, (max(3, (width - tw) // 2), i * height + (height + th) // 2), font, scale, (0, 0, 0), 1,
                    cv2.LINE_AA)
    return bar


def compose_figure(panels, scale):
    """panels: [(title, uint8 HxWx3 BGR)], all HxW; a title may have several lines ('\n'). Top row: full images;
    bottom row: the most detailed crop of the third panel (the MCNet output), zoomed, in every panel."""
    h, w = panels[0][1].shape[:2]
    disp_w = min(max(w, 256), 512)
    disp_h = max(1, round(h * disp_w / w))
    interp = cv2.INTER_NEAREST if disp_w >= w else cv2.INTER_AREA
    crop = (max(min(h, 8), min(h, max(16, min(h, w) // 4))), max(min(w, 8), min(w, max(16, min(h, w) // 4))))
    ref = cv2.cvtColor(panels[2][1], cv2.COLOR_BGR2GRAY)  # the MCNet output
    cy, cx = _crop_box(ref, crop)
    zoom_h = max(1, round(crop[0] * disp_w / crop[1]))
    red = (0, 0, 255)
    lines = max(title.count('\n') + 1 for title, _ in panels)
    columns = []
    for title, img in panels:
        full = cv2.resize(img, (disp_w, disp_h), interpolation=interp)
        fy, fx = disp_h / h, disp_w / w
        cv2.rectangle(full, (int(cx * fx), int(cy * fy)),
                      (int((cx + crop[1]) * fx) - 1, int((cy + crop[0]) * fy) - 1), red, 1)
        zoom = cv2.resize(img[cy:cy + crop[0], cx:cx + crop[1]], (disp_w, zoom_h), interpolation=cv2.INTER_NEAREST)
        sep = np.full((4, disp_w, 3), 255, np.uint8)
        columns.append(np.concatenate([_title_bar(title, disp_w, lines), full, sep, zoom], axis=0))
    gap = np.full((columns[0].shape[0], 4, 3), 255, np.uint8)
    row = [columns[0]]
    for col in columns[1:]:
        row += [gap, col]
    return np.concatenate(row, axis=1)
